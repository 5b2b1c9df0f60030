"""`dane bench prepare-memory`: peak RSS of `dane prepare` at several sizes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from ..common.options import JsonOut, PlotOut, parse_numbers, save_result
from .run import DEFAULT_SIZES


def prepare_memory(
    sizes: Annotated[
        str, typer.Option(help="Rows to prepare, comma-separated: one process per size.")
    ] = ",".join(map(str, DEFAULT_SIZES)),
    source: Annotated[
        str, typer.Option(help="synthetic, or images: a tree of grey PNGs written first.")
    ] = "synthetic",
    image_size: Annotated[int, typer.Option(help="The images' side.")] = 8,
    shards: Annotated[int, typer.Option(help="Shards of each store.")] = 4,
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """Peak memory of `dane prepare SOURCE` at each size (1x, 10x, 100x the synthetic
    default by default)."""
    from .run import NUM_CLASSES, SOURCES, markdown_table, plot, run_prepare_memory

    rows = parse_numbers(sizes, "--sizes", int)
    if not all(n >= 2 for n in rows) or image_size < 1:
        raise ValueError("--sizes must be at least 2 rows each and --image-size at least 1")
    if source not in SOURCES:
        raise ValueError(f"--source must be one of {', '.join(SOURCES)} (got {source!r})")
    if source == "images" and min(rows) < 2 * NUM_CLASSES:  # two images a class at least
        raise ValueError(f"--source images needs --sizes of at least {2 * NUM_CLASSES}")
    with tempfile.TemporaryDirectory(prefix="dane-bench-prepare-") as workdir:
        result = run_prepare_memory(
            rows,
            source=source,
            image_size=image_size,
            shards=shards,
            workdir=Path(workdir),
            log=typer.echo,
        )
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"prepare-memory": prepare_memory}
