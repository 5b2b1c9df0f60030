"""`dane bench local-step`: a worker's local step beside a plain PyTorch loop, in one process."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ..common.options import JsonOut, PlotOut, save_result


def local_step(
    store: Annotated[
        str | None,
        typer.Option(help="A store; unset: the 2-shard Fashion-MNIST store (else digits)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="The model; unset: compact-cnn (small-cnn on the digits store)."),
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Rows a step, B.")] = 64,
    steps: Annotated[int, typer.Option(help="Local steps a run, K.")] = 50,
    optimizer: Annotated[
        str, typer.Option(help="sgd-momentum (0.9, FedAvg's recipe) | sgd | adam.")
    ] = "sgd-momentum",
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 0.05,
    clip: Annotated[
        float, typer.Option(help="Clip each step's gradient to this norm; 0: off (the recipe).")
    ] = 0.0,
    repeats: Annotated[int, typer.Option(help="Timed runs of each loop, order alternating.")] = 3,
    threads: Annotated[int, typer.Option(help="torch threads, the same for both loops.")] = 1,
    seed: Annotated[int, typer.Option(help="The run's seed: initial weights and rows.")] = 0,
    workdir: Annotated[Path, typer.Option(help="Where the default store is written.")] = Path(
        "bench-out/local-step"
    ),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """A worker's local step beside a plain PyTorch loop: the same model, rows and optimizer.

    Times FedAvg's local phase on shard 0 as a worker runs it and the same K steps in plain
    PyTorch, in one process, the order alternating over repeats; gives ms a row of each,
    their ratio, whether their final weights agree, and the engine's top costs (cProfile).
    """
    from .report import markdown_table, plot
    from .run import LocalStepSpec, default_store, run_local_step

    spec = LocalStepSpec(
        store=store or "", model=model or "compact-cnn", batch_size=batch_size, steps=steps,
        optimizer=optimizer, lr=lr, clip=clip, repeats=repeats, threads=threads, seed=seed,
    ).validate()  # fmt: skip
    if store is None:  # after the checks: a bad flag writes no store
        written, fits = default_store(workdir)
        spec = replace(spec, store=written, model=model or fits)
    result = run_local_step(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"local-step": local_step}
