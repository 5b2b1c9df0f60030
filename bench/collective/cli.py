"""`dane bench collective`: the Dask graph's rounds against a gloo group's, in one run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import JsonOut, PlotOut, parse_numbers, save_result

WIDE_MODEL = "docs/results/round-form/many_tensors.py:wide"


def collective(
    store: Annotated[str, typer.Option(help="A store of 8 shards (written by `dane prepare`).")],
    model: Annotated[str, typer.Option(help="DANE's model (its bytes are the hop's).")] = (
        "small-cnn"
    ),
    wide_model: Annotated[
        str, typer.Option(help="FedAvg's model: ResNet-18's size by default; '' for --model.")
    ] = WIDE_MODEL,
    workers: Annotated[str, typer.Option(help="FedAvg's worker counts, comma-separated.")] = (
        "1,2"
    ),
    repeats: Annotated[int, typer.Option(help="Repeats, the collectives' order alternating.")] = 2,
    sweep: Annotated[
        list[Path] | None,
        typer.Option(exists=True, dir_okay=False, help="`dane bench shards` JSONs to project."),
    ] = None,
    workdir: Annotated[Path, typer.Option(help="Run directories.")] = Path("bench-out/collective"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """The Dask graph's rounds against a gloo group's, in one run: fixed costs, a round at
    ResNet-18 size, and the projected speed-ups they give."""
    from ..scaling.cli import read_json
    from .report import markdown_table, plot
    from .run import run_collective

    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1 (got {repeats})")
    counts = parse_numbers(workers, "--workers", int)
    if 2 not in counts:
        raise ValueError(f"--workers must include 2, the compared count (got {workers})")
    result = run_collective(
        store=store, model=model, wide_model=wide_model, workers=tuple(counts),
        repeats=repeats, sweeps=[read_json(p, "--sweep") for p in sweep or []],
        workdir=workdir, log=typer.echo,
    )  # fmt: skip
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


def collective_crossover(
    sizes: Annotated[str, typer.Option(help="Sizes in MiB, comma-separated.")] = (
        "0.35,1,2,4,8,16"
    ),
    json_out: JsonOut = None,
) -> None:
    """Where a gloo all-gather stops beating a Dask hop: both timed at each size, 2 workers."""
    from .crossover import crossover_table, run_crossover

    values = parse_numbers(sizes, "--sizes", float)
    if not values or min(values) <= 0:
        raise ValueError(f"--sizes takes positive MiB, comma-separated (got {sizes})")
    save_result(run_crossover(values, log=typer.echo), json_out, table=crossover_table)


COMMANDS = {"collective": collective, "collective-crossover": collective_crossover}
