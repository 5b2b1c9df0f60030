"""`dane bench ddp` (PyTorch DDP beside dask-dane) and `dane bench single` (one process,
plain PyTorch: the baseline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import (
    BatchSize,
    GradSample,
    JsonOut,
    LocalSteps,
    Model,
    Networks,
    PlotOut,
    Seed,
    Store,
    Workdir,
    networks_or_standard,
    save_result,
    spec_from_options,
)

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


def ddp(
    ctx: typer.Context,
    store: Store,
    model: Model = "lenet",
    workers: Annotated[int, typer.Option(help="DDP ranks = Dask workers.")] = 2,
    epochs: Annotated[float, typer.Option(help="DDP: passes over the training set.")] = 2.0,
    batch_size: BatchSize = 64,
    lr: Annotated[
        float, typer.Option(help="Learning rate (DDP, SGD, DANE's local solver).")
    ] = 0.05,
    momentum: Annotated[float, typer.Option(help="Momentum.")] = 0.9,
    eval_every: Annotated[int, typer.Option(help="DDP: steps between evaluations.")] = 50,
    dane_rounds: Annotated[int, typer.Option(help="DANE iterations.")] = 20,
    local_steps: LocalSteps = 50,
    grad_sample: GradSample = 1000,
    sgd_rounds: Annotated[int, typer.Option(help="dask-dane synchronous SGD rounds.")] = 200,
    runs: Runs = None,
    target: Targets = None,
    single: Annotated[
        bool, typer.Option(help="Also train in one process (same cores, same global batch).")
    ] = True,
    seed: Seed = 0,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "cpu",
    network: Networks = None,
    workdir: Workdir = Path("bench-out/ddp"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """PyTorch DDP, one process and dask-dane's methods on the same shards, side by side."""
    options = ctx.params  # every option by name, as the spec's fields are named
    from .compare import CompareSpec, default_runs, read_runs, run_compare
    from .report import compare_plot, compare_table
    from .spec import DdpSpec

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
    spec = spec_from_options(
        CompareSpec,
        options,
        ddp=spec_from_options(DdpSpec, options, target=targets[0]),
        runs=dask_runs,
        targets=targets,
        networks=networks_or_standard(network),
    ).validate()
    result = run_compare(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=compare_plot, table=compare_table)


def single(
    ctx: typer.Context,
    store: Store,
    model: Model = "lenet",
    epochs: Annotated[float, typer.Option(help="Passes over the training set.")] = 2.0,
    batch_size: BatchSize = 64,
    lr: Annotated[float, typer.Option(help="Learning rate (SGD with momentum).")] = 0.05,
    momentum: Annotated[float, typer.Option(help="Momentum.")] = 0.9,
    lr_schedule: Annotated[
        str, typer.Option(help="constant | cosine | step, over the steps.")
    ] = "constant",
    warmup_epochs: Annotated[
        float, typer.Option(help="Raise the lr linearly from --warmup-lr over these epochs.")
    ] = 0.0,
    warmup_lr: Annotated[float, typer.Option(help="The lr the warm-up starts from.")] = 0.0,
    eval_every: Annotated[int, typer.Option(help="Steps between evaluations.")] = 50,
    seed: Seed = 0,
    target: Targets = None,
    threads: Annotated[int, typer.Option(help="Torch threads; 0: every core.")] = 0,
    l2: Annotated[
        float | None, typer.Option(help="L2 penalty lambda (default: the store's, else 0).")
    ] = None,
    augment: Annotated[
        str, typer.Option(help="Random flips / crops of each minibatch: flip | crop=P | both.")
    ] = "",
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """One process, plain PyTorch: the same model, data and weights, no Dask (the baseline)."""
    options = ctx.params  # every option by name, as the spec's fields are named
    from .single import SingleSpec, markdown_table, plot, run_single

    spec = spec_from_options(
        SingleSpec, options, targets=tuple(target or DEFAULT_TARGETS)
    ).validate()
    save_result(
        run_single(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


COMMANDS = {"ddp": ddp, "single": single}
