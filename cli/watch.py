"""`dane watch RUN_DIR`: follow a run started elsewhere, from its files.

It reads the run directory only (metrics.jsonl, config.toml, summary.json), so it works on
any machine that sees the folder, beside any cluster, and changes nothing. On a terminal it
redraws a view as rounds are appended; elsewhere (a pipe, nohup, a batch job's log) it
writes one line a round, since a redrawn view shows nothing there. It exits once
summary.json appears (the run has ended).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import IO, Any

from ..pipeline.engine.run.metrics import read_metrics
from ..pipeline.engine.run.rundir import RunDir
from ..pipeline.setup.config import read_record

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40  # rounds shown in a sparkline: the latest ones
# The ETA's pace: the mean round time of the latest rounds, which follows a run whose rounds
# change speed (a resized cluster, a longer schedule) without taking one slow round for it.
PACE_ROUNDS = 5
# The first round a process runs (round 1, and the first after each resume) holds its start-up
# too: the workers' warm-up, compilation, the shards' first reads. It is no pace: from it alone
# the ETA of a 26 s run read 3m 33s after round 1 (on the digits here round 1 takes 1.7 s,
# each round after it 0.16 s).
FIRST_ROUNDS = (1,)
WAIT_POLL_S = 0.2  # how often a run folder that is not there yet is looked for
WAIT_S = 60.0  # how long `dane watch` waits for it by default: a cluster's start, and more


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """The last `width` values as bars scaled between their own minimum and maximum."""
    shown = values[-width:]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = (high - low) or 1.0
    return "".join(BARS[round((v - low) / span * (len(BARS) - 1))] for v in shown)


def eta_seconds(
    rows: list[dict[str, Any]], planned: int | None, *, first: Collection[int] = FIRST_ROUNDS
) -> float | None:
    """Seconds until round `planned` at the pace of the last PACE_ROUNDS rounds (their mean
    wall_s), the rounds in `first` (a process's first: start-up) left out; None where unknown:
    no planned rounds, or no other round timed yet."""
    timed = [r["wall_s"] for r in rows if r["round"] not in first and r.get("wall_s") is not None]
    recent = timed[-PACE_ROUNDS:]
    if not planned or not recent:
        return None
    left = max(planned - rows[-1]["round"], 0)
    return left * sum(recent) / len(recent)


def duration(seconds: float) -> str:
    """`45s`, `1m 05s`, `2h 03m`: a duration as people read it."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, whole = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {whole:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def eta(
    rows: list[dict[str, Any]], planned: int | None, *, first: Collection[int] = FIRST_ROUNDS
) -> str:
    """`~ 1m 05s`, or `-` where eta_seconds does not know."""
    seconds = eta_seconds(rows, planned, first=first)
    return "-" if seconds is None else f"~ {duration(seconds)}"


def render(
    rows: list[dict[str, Any]],
    planned: int | None,
    finished: bool,
    *,
    first: Collection[int] = FIRST_ROUNDS,
) -> str:
    """The view of a run's rows so far (plain text with rich markup)."""
    if not rows:
        return "waiting for the first round ..."
    last = rows[-1]
    losses = [r["train_loss"] for r in rows if r.get("train_loss") is not None]
    accuracy = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
    of = f" of {planned}" if planned else ""
    left = eta(rows, planned, first=first)
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
    if not finished:
        pace = ", from the last rounds' pace" if left != "-" else ""
        lines.append(f"ETA            {left}{pace}")
    return "\n".join(lines)


def round_line(
    rows: list[dict[str, Any]], planned: int | None, *, first: Collection[int] = FIRST_ROUNDS
) -> str:
    """The plain line of the last of `rows`, its ETA from those rows, for output that is not
    a terminal."""
    last = rows[-1]
    of = f" of {planned}" if planned else ""
    loss = last.get("train_loss")
    accuracy = last.get("test_accuracy")
    parts = [
        f"round {last['round']}{of}: train loss {'-' if loss is None else f'{loss:.4f}'}",
        *([] if accuracy is None else [f"test accuracy {100 * accuracy:.2f} %"]),
        f"{last['comm_bytes'] / 1e6:.2f} MB this round",
        f"round {last['wall_s']:.2f} s",
        f"ETA {eta(rows, planned, first=first)}",
    ]
    return ", ".join(parts)


def finished_line(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The plain line that ends a run: its rounds and time, its final and selected accuracy."""
    rounds = summary.get("rounds", rows[-1]["round"] if rows else 0)
    wall = summary.get("total_wall_s", sum(r.get("wall_s") or 0.0 for r in rows))
    line = f"finished: {rounds} rounds in {duration(wall)}"
    if (accuracy := summary.get("final_test_accuracy")) is not None:
        line += f", test accuracy {100 * accuracy:.2f} %"
    best, at_best = summary.get("best_round"), summary.get("test_accuracy_at_best")
    if best and at_best is not None:
        line += f", best round {best} ({100 * at_best:.2f} %)"
    return line


def check_run_dir(run_dir: Path, waited: float = 0.0) -> RunDir:
    from ..datasets.store.mistaken import is_store, store_not_run

    run = RunDir(run_dir)
    if is_store(run_dir):
        raise ValueError(store_not_run(run_dir))
    if not run.root.is_dir() or not (run.config.exists() or run.metrics.exists()):
        after = f" after {waited:g} s of waiting" if waited else ""
        raise ValueError(
            f"{run_dir} is not a run directory (no config.toml or metrics.jsonl{after}); pass "
            "the --out folder of a `dane train` run"
        )
    return run


def starting(run_dir: Path) -> bool:
    """A folder a `dane train` may still be creating: none yet, or one holding only what a
    run writes before its config.toml (the cluster's log). A folder that holds anything else
    is not a run about to start, and is refused at once."""
    if not run_dir.exists():
        return True
    if not run_dir.is_dir() or (run_dir / "config.toml").exists():
        return False
    early = lambda name: name == "cluster.log" or name.startswith(".write-test-")  # noqa: E731
    return all(early(entry.name) for entry in run_dir.iterdir())


def wait_for_run(run_dir: Path, wait: float, say: Callable[[str], None]) -> RunDir:
    """The run at `run_dir` once `dane train` has written its config.toml: a watch started
    beside the train would otherwise be refused in the seconds before the folder appears.
    Says once that it waits; after `wait` seconds, check_run_dir's one-line error."""
    deadline = time.monotonic() + wait
    waited = False
    while starting(run_dir) and time.monotonic() < deadline:
        if not waited:
            say(f"waiting for {run_dir} to start (up to {wait:g} s, --wait) ...")
            waited = True
        time.sleep(max(min(WAIT_POLL_S, deadline - time.monotonic()), 0.0))
    return check_run_dir(run_dir, waited=wait if waited else 0.0)


def read_summary(run: RunDir) -> dict[str, Any]:
    """summary.json, or {} where it cannot be read (its figures are then the rows')."""
    try:
        return json.loads(run.summary.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def follow_lines(
    run: RunDir,
    planned: int | None,
    interval: float,
    out: IO[str],
    first: Collection[int] = FIRST_ROUNDS,
) -> None:
    """One line a new round, each flushed (a log read while the run goes on), and one when
    the run has ended."""

    def write(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    of = f", {planned} rounds planned" if planned else ""
    write(f"watching {run.root}{of}: a line a round, until the run ends")
    shown = 0  # the last round written
    while True:
        finished = run.summary.exists()  # read before the rows: none can follow it
        rows = read_metrics(run.metrics)
        for count, row in enumerate(rows, start=1):
            if row["round"] > shown:
                write(round_line(rows[:count], planned, first=first))
                shown = row["round"]
        if finished:
            write(finished_line(read_summary(run), rows))
            return
        time.sleep(interval)


def planned_rounds(run: RunDir) -> tuple[int | None, tuple[int, ...]]:
    """The rounds a run plans (None where config.toml is not there), and the first round of
    each of its processes: 1 and the one after each resume recorded in config.toml."""
    if not run.config.exists():
        return None, FIRST_ROUNDS
    record = read_record(run.config)
    resumed = tuple(resume.after_round + 1 for resume in record.resumes)
    return record.effective.get("rounds"), (*FIRST_ROUNDS, *resumed)


def follow(run_dir: Path, interval: float = 1.0, console: Any = None, wait: float = 0.0) -> None:
    """Redraw the view every `interval` seconds until summary.json appears; where the console
    is not an interactive terminal, write lines instead (follow_lines). A run folder not
    there yet is waited for up to `wait` seconds (wait_for_run), said on stderr."""
    import sys

    from rich.console import Console
    from rich.live import Live

    run = wait_for_run(run_dir, wait, lambda line: print(line, file=sys.stderr, flush=True))
    planned, first = planned_rounds(run)
    console = console or Console()
    if not console.is_interactive:  # false off a terminal too
        follow_lines(run, planned, interval, console.file, first)
        return
    with Live(console=console, auto_refresh=False) as live:
        while True:
            finished = run.summary.exists()  # read before the rows: none can follow it
            view = render(read_metrics(run.metrics), planned, finished, first=first)
            live.update(view, refresh=True)
            if finished:
                return  # Live ends a terminal's view with a newline (test_watch checks)
            time.sleep(interval)


def watch(run_dir: Path, interval: float = 1.0, wait: float = WAIT_S) -> None:
    """Follow a run's rounds (round, loss and accuracy sparklines, bytes, the slowest worker,
    the ETA) from its run directory, live on a terminal and a line a round elsewhere; exits
    when the run ends. A run folder not there yet is waited for up to `wait` seconds."""
    follow(run_dir, interval, wait=wait)
