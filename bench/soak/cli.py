"""`dane bench soak`: many rounds on a small store; memory, tasks and round times must stay flat."""

from __future__ import annotations

from typing import Any

import typer

from ..common.options import JsonOut, save_result, spec_from_flags, spec_options
from .spec import SoakSpec


@spec_options(SoakSpec)
def soak(*, json_out: JsonOut = None, **flags: Any) -> None:
    """Many rounds on a small store: memory, leftover tasks and round times must stay flat."""
    from .run import markdown_table, run_soak

    spec = spec_from_flags(SoakSpec, flags).validate()
    save_result(run_soak(spec, log=typer.echo), json_out, table=markdown_table)


COMMANDS = {"soak": soak}
