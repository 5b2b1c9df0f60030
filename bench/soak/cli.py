"""`dane bench soak`: many rounds on a small store; memory, tasks and round times must stay flat."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import (
    JsonOut,
    LocalSteps,
    Workdir,
    save_result,
    spec_from_options,
)


def soak(
    ctx: typer.Context,
    rounds: Annotated[int, typer.Option(help="Rounds to run.")] = 300,
    warmup: Annotated[int, typer.Option(help="Rounds before the baseline is taken.")] = 30,
    workers: Annotated[int, typer.Option(help="Workers (and shards) of the local cluster.")] = 2,
    algorithm: Annotated[str, typer.Option(help="Algorithm to train.")] = "dane",
    model: Annotated[str, typer.Option(help="Model (digits store).")] = "mlp",
    local_steps: LocalSteps = 5,
    workdir: Workdir = Path("bench-out/soak"),
    json_out: JsonOut = None,
) -> None:
    """Many rounds on a small store: memory, leftover tasks and round times must stay flat."""
    options = ctx.params  # every option by name, as the spec's fields are named
    from .run import SoakSpec, markdown_table, run_soak

    spec = spec_from_options(SoakSpec, options).validate()
    save_result(run_soak(spec, log=typer.echo), json_out, table=markdown_table)


COMMANDS = {"soak": soak}
