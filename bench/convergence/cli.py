"""`dane bench convergence`: DANE's convergence on convex problems (Shamir et al. 2014,
section 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import (
    JsonOut,
    PlotOut,
    Workdir,
    parse_numbers,
    save_result,
    spec_from_options,
)


def convergence(
    ctx: typer.Context,
    problem: Annotated[
        str, typer.Option(help="ridge (synthetic-ridge, linear) | logistic (digits-tabular).")
    ] = "ridge",
    machines: Annotated[str, typer.Option(help="Shard counts m, comma-separated.")] = "4,16,64",
    samples: Annotated[
        str, typer.Option(help="ridge: training samples N, comma-separated.")
    ] = "6000,10000,14000",
    mu: Annotated[str, typer.Option(help="DANE (and fedprox) mu values, comma-separated.")] = (
        "0,0.015"
    ),
    eta: Annotated[float, typer.Option(help="DANE eta.")] = 1.0,
    rounds: Annotated[int, typer.Option(help="Iterations per run.")] = 30,
    seeds: Annotated[int, typer.Option(help="Seeds (data, partition, init) per cell.")] = 3,
    algorithms: Annotated[
        str, typer.Option(help="Comma-separated: dane, admm, one-shot, gd, agd, fedprox.")
    ] = "dane",
    local_solver: Annotated[str, typer.Option(help="Exact local solver: cg | lbfgs.")] = "cg",
    local_tol: Annotated[float, typer.Option(help="Its relative gradient tolerance.")] = 1e-10,
    rho: Annotated[
        float | None, typer.Option(help="admm penalty (default: sqrt(L * lambda_min)).")
    ] = None,
    l2: Annotated[
        float | None, typer.Option(help="L2 lambda (default: ridge 0.005, logistic 1e-3).")
    ] = None,
    workdir: Workdir = Path("bench-out/convergence"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """DANE's convergence against m, N and mu (Shamir et al. 2014, section 7), with baselines."""
    options = ctx.params  # every option by name, as the spec's fields are named
    from ..common.output import saving_partial
    from .report import markdown_table, plot
    from .run import ConvergenceSpec, run_convergence

    spec = spec_from_options(
        ConvergenceSpec,
        options,
        machines=parse_numbers(machines, "--machines", int),
        samples=parse_numbers(samples, "--samples", int),
        mus=parse_numbers(mu, "--mu", float),
        algorithms=tuple(a.strip() for a in algorithms.split(",")),
    ).validate()
    result = run_convergence(spec, log=typer.echo, on_cell=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"convergence": convergence}
