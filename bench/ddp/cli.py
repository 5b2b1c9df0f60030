"""`dane bench ddp` (PyTorch DDP beside dask-dane) and `dane bench single` (one process,
plain PyTorch: the baseline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import (
    GradSample,
    JsonOut,
    LocalSteps,
    Networks,
    PlotOut,
    networks_or_standard,
    save_result,
    spec_from_flags,
    spec_options,
)
from .compare import CompareSpec
from .single import SingleSpec
from .spec import DdpSpec

DEFAULT_TARGETS = (0.88,)
Targets = Annotated[
    list[float] | None,
    typer.Option(
        metavar="ACCURACY",
        help=f"Test accuracy to reach (repeatable) [{', '.join(map(str, DEFAULT_TARGETS))}].",
    ),
]

Runs = Annotated[
    Path | None,
    typer.Option(
        help="TOML of dask-dane runs ([defaults], [[run]] name = ...) instead of DANE and "
        "SGD from the flags above; each starts from the DDP run's settings."
    ),
]


@spec_options(DdpSpec)  # the DDP run's options, then the comparison's own
@spec_options(CompareSpec)
def ddp(
    *,
    dane_rounds: Annotated[int, typer.Option(help="DANE iterations.")] = 20,
    local_steps: LocalSteps = 50,
    grad_sample: GradSample = 1000,
    sgd_rounds: Annotated[int, typer.Option(help="dask-dane synchronous SGD rounds.")] = 200,
    runs: Runs = None,
    target: Targets = None,
    network: Networks = None,
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
    **flags: Any,
) -> None:
    """PyTorch DDP, one process and dask-dane's methods on the same shards, side by side."""
    from .compare import default_runs, read_runs, run_compare
    from .report import compare_plot, compare_table

    targets = tuple(target or DEFAULT_TARGETS)
    dask_runs = (
        read_runs(runs)
        if runs
        else default_runs(
            dane_rounds=dane_rounds,
            local_steps=local_steps,
            grad_sample=grad_sample,
            sgd_rounds=sgd_rounds,
            sgd_eval_every=10,
        )
    )
    spec = spec_from_flags(
        CompareSpec,
        flags,
        ddp=spec_from_flags(DdpSpec, flags, target=targets[0]),
        runs=dask_runs,
        targets=targets,
        networks=networks_or_standard(network),
    ).validate()
    result = run_compare(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=compare_plot, table=compare_table)


@spec_options(SingleSpec)
def single(
    *, target: Targets = None, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any
) -> None:
    """One process, plain PyTorch: the same model, data and weights, no Dask (the baseline)."""
    from .single import markdown_table, plot, run_single

    targets = tuple(target or DEFAULT_TARGETS)
    spec = spec_from_flags(SingleSpec, flags, targets=targets).validate()
    save_result(
        run_single(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


COMMANDS = {"ddp": ddp, "single": single}
