"""`dane report`'s table in the terminal: one line per run, what a reader compares first.

best.pt acc: the test accuracy of the round the run selected (best.pt; the last row marked
is_best), else the highest test accuracy of its rows; final: its last evaluated test accuracy.
Time: the rounds' wall time (the sum of wall_s, as the plots' time axis); MB: every byte the
run's rounds moved (cum_comm_bytes of its last row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HEADER = ("run", "rounds", "best.pt acc (round)", "final acc", "time", "MB")


def run_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The table's figures of one run's metrics rows (see the module's docstring)."""
    scored = [row for row in rows if row.get("test_accuracy") is not None]
    marked = [row for row in scored if row.get("is_best")]
    best = marked[-1] if marked else max(scored, key=lambda r: r["test_accuracy"], default=None)
    return {
        "rounds": rows[-1]["round"],
        "best": None if best is None else (best["test_accuracy"], best["round"]),
        "final": scored[-1]["test_accuracy"] if scored else None,
        "seconds": sum(row.get("wall_s") or 0.0 for row in rows),
        "mb": (rows[-1].get("cum_comm_bytes") or 0) / 1e6,
    }


def table_lines(names: Sequence[str], runs: Sequence[list[dict[str, Any]]]) -> list[str]:
    """The header and one line per run (`names` as the user gave the folders), aligned."""
    cells = [HEADER]
    for name, rows in zip(names, runs, strict=True):
        fig = run_figures(rows)
        best = "-" if fig["best"] is None else f"{fig['best'][0]:.4f} ({fig['best'][1]})"
        final = "-" if fig["final"] is None else f"{fig['final']:.4f}"
        seconds, mb = f"{fig['seconds']:.1f} s", f"{fig['mb']:.2f}"
        cells.append((name, str(fig["rounds"]), best, final, seconds, mb))
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    # The run's name left-aligned, the figures right-aligned under their headings.
    return [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    ]
