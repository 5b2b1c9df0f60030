"""The one writer of every benchmark's results: the JSON file, the PNG and the table.

Each result records the command that produced it. The JSON is written atomically (a reader
never sees half a file), also while a long bench runs, so that an interrupted one keeps what
it finished.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...pipeline.engine.run.checkpoint import atomic_write_bytes

Result = dict[str, Any]


def percent(fraction: float) -> str:
    """A target accuracy as tables print it: 0.88 -> "88%", 0.925 -> "92.5%" (not "92%")."""
    return f"{round(float(fraction) * 100, 2):g}%"


def command_line() -> str:
    """The `dane ...` command being run, as the results record it."""
    return "dane " + " ".join(sys.argv[1:])


def write_json(result: Result, path: Path) -> None:
    """The result as JSON at `path` (its folder made if need be), replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1) + "\n"
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))


def save_results(
    result: Result,
    *,
    json_out: Path | None,
    plot_out: Path | None = None,
    plot: Callable[[Result, Path], None] | None = None,
    table: Callable[[Result], str],
    echo: Callable[[str], None] = print,
) -> Result:
    """Record the command, write the JSON and the PNG where asked, print the table."""
    result = {**result, "command": command_line()}
    if json_out is not None:
        write_json(result, json_out)
    if plot_out is not None:
        if plot is None:
            raise ValueError("this benchmark draws no figure; drop --plot")
        plot(result, plot_out)
    echo(table(result))
    return result


def saving_partial(json_out: Path | None) -> Callable[[Result], None]:
    """A callback that writes a result so far (with the command) to `json_out`, if given."""

    def save(partial: Result) -> None:
        if json_out is not None:
            write_json({**partial, "command": command_line()}, json_out)

    return save
