"""`dane bench gpu-correctness`: the Dask run on a GPU against the CPU reference, to 1e-9."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def gpu_correctness(
    out: Annotated[Path, typer.Option(help="JSON file to write.")],
    device: Annotated[str, typer.Option(help="cuda, or cpu to try the check.")] = "cuda",
) -> None:
    """DANE on L2-regularised logistic regression in float64: Dask on DEVICE against the
    single-process reference on the CPU (bench/scripts/gpu-check.sh runs it)."""
    import tempfile

    from ..common.output import write_json
    from .correctness import check

    with tempfile.TemporaryDirectory() as tmp:
        result = check(Path(tmp), device)
    write_json(result, out)
    typer.echo(f"{result['detail']} {result['verdict']}")


COMMANDS = {"gpu-correctness": gpu_correctness}
