"""`dane bench convergence`: DANE's convergence on convex problems (Shamir et al. 2014,
section 7)."""

from __future__ import annotations

from typing import Any

import typer

from ..common.options import JsonOut, PlotOut, save_result, spec_from_flags, spec_options
from .problem import ConvergenceSpec


@spec_options(ConvergenceSpec)
def convergence(*, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any) -> None:
    """DANE's convergence against m, N and mu (Shamir et al. 2014, section 7), with baselines."""
    from ..common.output import saving_partial
    from .report import markdown_table, plot
    from .run import run_convergence

    spec = spec_from_flags(ConvergenceSpec, flags).validate()
    result = run_convergence(spec, log=typer.echo, on_cell=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"convergence": convergence}
