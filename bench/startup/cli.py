"""`dane bench cli-startup`: the wall time of `dane --help`, `dane train --help` and
`dane bench --help` in fresh processes, and whether each imported torch."""

from __future__ import annotations

from typing import Annotated

import typer

from ..common.options import JsonOut, PlotOut, save_result
from .run import DEFAULT_REPEATS


def cli_startup(
    repeats: Annotated[
        int, typer.Option(help="Fresh processes per command (median and min reported).")
    ] = DEFAULT_REPEATS,
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """How long `dane --help`, `dane train --help` and `dane bench --help` take in a fresh
    process (and a bare `python -c pass`), and whether each imports torch."""
    from .run import markdown_table, plot, run_cli_startup

    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1 (got {repeats})")
    result = run_cli_startup(repeats, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"cli-startup": cli_startup}
