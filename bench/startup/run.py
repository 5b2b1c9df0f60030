"""Time `dane ... --help` in fresh interpreters: the wait a user has before the first line.

Each repeat is a new process (`python -c`, running the `dane` entry point as the console
script does), so every import is paid again, as at a shell; the child reports at exit whether
torch was imported, the usual reason a help page is slow. The bare interpreter
(`python -c pass`) is timed alongside: the floor no change to dask-dane can go below.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_REPEATS = 10
# The help pages timed: the listing, and the two commands cli/lazy.py builds only when named.
COMMANDS = (("--help",), ("train", "--help"), ("bench", "--help"))
BASELINE = "python -c pass"

# Run in the child: `dane ARGS` as the console script runs it, then one JSON line on stderr
# saying which heavy libraries the help imported.
CHILD = """
import atexit, json, sys
from dask_dane.cli import main
sys.argv = ["dane", *sys.argv[1:]]
HEAVY = ("torch", "numpy", "zarr", "distributed", "matplotlib")
atexit.register(lambda: print("IMPORTED " + json.dumps(
    {name: name in sys.modules for name in HEAVY}), file=sys.stderr))
main()
"""


def time_once(args: tuple[str, ...] | None) -> tuple[float, dict[str, bool]]:
    """Wall seconds of one fresh `dane ARGS` (None: the bare interpreter), and its imports."""
    command = [sys.executable, "-c", "pass"]
    if args is not None:
        command = [sys.executable, "-c", CHILD, *args]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise RuntimeError(f"{' '.join(command[:1] + list(args or ()))} failed: {tail}")
    lines = [line for line in done.stderr.splitlines() if line.startswith("IMPORTED ")]
    imported = json.loads(lines[-1].removeprefix("IMPORTED ")) if lines else {}
    return wall_s, imported


def run_cli_startup(
    repeats: int = DEFAULT_REPEATS, *, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Median and min wall time of each help page (and the bare interpreter) over `repeats`
    fresh processes, interleaved so that a busy moment of the machine hits every page."""
    names = [BASELINE, *(" ".join(["dane", *args]) for args in COMMANDS)]
    arguments: list[tuple[str, ...] | None] = [None, *COMMANDS]
    times: dict[str, list[float]] = {name: [] for name in names}
    imported: dict[str, dict[str, bool]] = {}
    for _ in range(repeats):
        for name, args in zip(names, arguments, strict=True):
            wall_s, seen = time_once(args)
            times[name].append(wall_s)
            imported[name] = seen
    rows = []
    for name in names:
        row = {
            "command": name,
            "median_s": round(statistics.median(times[name]), 4),
            "min_s": round(min(times[name]), 4),
            "max_s": round(max(times[name]), 4),
            "imports_torch": imported[name].get("torch", False),
            "imported": [lib for lib, yes in imported[name].items() if yes],
        }
        rows.append(row)
        log(f"{name}: median {row['median_s']:.3f} s, min {row['min_s']:.3f} s")
    return {"repeats": repeats, "python": sys.version.split()[0], "runs": rows}


def markdown_table(result: dict[str, Any]) -> str:
    """One line per command: median, min, max, and what it imported."""
    lines = [
        "| command | median (s) | min (s) | max (s) | torch imported | heavy imports |",
        "|---|---:|---:|---:|---|---|",
    ]
    for run in result["runs"]:
        lines.append(
            f"| `{run['command']}` | {run['median_s']:.3f} | {run['min_s']:.3f} | "
            f"{run['max_s']:.3f} | {'yes' if run['imports_torch'] else 'no'} | "
            f"{', '.join(run['imported']) or 'none'} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Median (bar) and min (tick) per command; red where the page imported torch."""
    from ...pipeline.report import pyplot, save_figure

    runs = result["runs"]
    fig, axis = pyplot().subplots(figsize=(6, 0.6 * len(runs) + 1.2))
    rows = range(len(runs))
    colours = ["tab:red" if r["imports_torch"] else "tab:blue" for r in runs]
    axis.barh(rows, [r["median_s"] for r in runs], color=colours, label="median")
    axis.plot([r["min_s"] for r in runs], rows, "k|", markersize=14, label="min")
    axis.set_yticks(list(rows), [r["command"] for r in runs])
    axis.invert_yaxis()
    axis.axvline(1.0, color="grey", linestyle="--", linewidth=1)  # the 1 s budget (issue 35)
    axis.set_xlabel(f"seconds, fresh process ({result['repeats']} repeats); red: imports torch")
    axis.legend(loc="upper right")  # the short rows (bare python) leave it room
    fig.tight_layout()
    save_figure(fig, path)
