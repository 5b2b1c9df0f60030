"""`dane watch RUN_DIR`: follow a run started elsewhere, in the terminal, from its files.

It reads the run directory only (metrics.jsonl, config.toml, summary.json), so it works on
any machine that sees the folder, beside any cluster, and changes nothing. It redraws as
rounds are appended and exits once summary.json appears (the run has ended).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..pipeline.run.metrics import read_metrics
from ..pipeline.run.rundir import RunDir
from ..pipeline.setup.config import read_toml

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40  # rounds shown in a sparkline: the latest ones


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """The last `width` values as bars scaled between their own minimum and maximum."""
    shown = values[-width:]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = (high - low) or 1.0
    return "".join(BARS[round((v - low) / span * (len(BARS) - 1))] for v in shown)


def render(rows: list[dict[str, Any]], planned: int | None, finished: bool) -> str:
    """The view of a run's rows so far (plain text with rich markup)."""
    if not rows:
        return "waiting for the first round ..."
    last = rows[-1]
    losses = [r["train_loss"] for r in rows if r.get("train_loss") is not None]
    accuracy = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
    of = f" of {planned}" if planned else ""
    lines = [
        f"[bold]round {last['round']}{of}[/bold]  {last['algorithm']}  "
        f"{'[green]finished[/green]' if finished else 'training'}",
        f"train loss     {losses[-1]:.4f}  {sparkline(losses)}" if losses else "train loss     -",
        f"test accuracy  {100 * accuracy[-1]:.2f} %  {sparkline(accuracy)}"
        if accuracy
        else "test accuracy  - (not evaluated yet)",
        f"bytes          {last['comm_bytes'] / 1e6:.2f} MB this round, "
        f"{last['cum_comm_bytes'] / 1e6:.1f} MB in all, {last['comm_rounds']} comm rounds",
        f"slowest worker {last.get('slowest_worker', '?')}: {last['max_worker_compute_s']:.2f} s "
        f"of compute (median {last.get('median_worker_compute_s', 0.0):.2f} s), round "
        f"{last['wall_s']:.2f} s",
    ]
    return "\n".join(lines)


def check_run_dir(run_dir: Path) -> RunDir:
    run = RunDir(run_dir)
    if not run.root.is_dir() or not (run.config.exists() or run.metrics.exists()):
        raise ValueError(
            f"{run_dir} is not a run directory (no config.toml or metrics.jsonl); pass the "
            "--out folder of a `dane train` run"
        )
    return run


def follow(run_dir: Path, interval: float = 1.0, console: Any = None) -> None:
    """Redraw the view every `interval` seconds until summary.json appears."""
    from rich.console import Console
    from rich.live import Live

    run = check_run_dir(run_dir)
    planned = read_toml(run.config).get("rounds") if run.config.exists() else None
    console = console or Console()
    with Live(console=console, auto_refresh=False) as live:
        while True:
            finished = run.summary.exists()  # read before the rows: none can follow it
            live.update(render(read_metrics(run.metrics), planned, finished), refresh=True)
            if finished:
                return
            time.sleep(interval)


def watch(run_dir: Path, interval: float = 1.0) -> None:
    """Follow a run's rounds live (round, loss and accuracy sparklines, bytes, the slowest
    worker) from its run directory; exits when the run ends."""
    follow(run_dir, interval)
