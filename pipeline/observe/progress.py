"""What a run tells its caller as it goes: the API's progress lines, built on the engine's
Callbacks (pipeline/engine/run/callbacks.py, re-exported here), and the noise-scale warning.
This module imports neither torch nor Dask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.run.callbacks import Callbacks, chain
from .collapse import CollapseWatch, advice

if TYPE_CHECKING:
    from rich.console import Console

    from ..engine.protocol import Strategy
    from ..setup.config import RunConfig

__all__ = ["Callbacks", "ProgressLines", "chain", "startup_lines"]

# Past the gradient noise scale a step's extra rows buy little: steps to a target go as
# 1 + B_noise / (m B) (McCandlish et al. 2018), so at m B = 4 B_noise the steps are within
# 25 % of their floor and doubling the workers again cuts them by 1.1x only.
BATCH_OVER_NOISE = 4.0
# The smoothed noise scale has seen two rounds by then: one round's estimate is too noisy.
WARN_FROM_ROUND = 2


def startup_lines(dashboard: str, workers: int, held: str) -> list[str]:
    """The start-up lines a person reads, each short and on its own: the cluster, how the
    workers hold the shards and the evaluation rows, the collective and why, the dashboard.
    `held` is Callbacks.on_shards' phrase (engine/run/loop.py: the shards' choice, then
    "; evaluation, a worker's part: ..." and "; rounds: " the collective's)."""
    shards, _, collective = held.partition("; rounds: ")
    shards, _, evaluation = shards.partition("; evaluation, a worker's part: ")
    lines = [f"cluster: {workers} workers"]
    lines += [f"shards: {shards}"] if shards else []
    lines += [f"evaluation: {evaluation}"] if evaluation else []
    lines += [f"collective: {collective}"] if collective else []
    lines += [f"dashboard: {dashboard}"] if dashboard else []
    if dashboard.endswith("/status"):  # the run's own page, beside Dask's
        lines.append(f"DANE page: {dashboard.removesuffix('/status')}/dane")
    return lines


def noise_warning(row: dict[str, Any], batch_size: int) -> str | None:
    """The line `dane train` prints (once) when a step's rows, workers x --batch-size, are
    BATCH_OVER_NOISE times the run's smoothed gradient noise scale or more; else None."""
    scale = row.get("noise_scale_ema")
    if row["round"] < WARN_FROM_ROUND or scale is None or scale <= 0:
        return None
    workers = row.get("num_workers") or 1
    rows = workers * batch_size
    if rows < BATCH_OVER_NOISE * scale:
        return None
    return (
        f"warning: {workers} workers x --batch-size {batch_size} = {rows} rows a step, "
        f"{rows / scale:.0f}x the gradient noise scale ({scale:.0f} rows): more workers will "
        "hardly shorten training; see `dane advise`"
    )


def number(value: float | None, digits: int = 4) -> str:
    """A figure as the progress lines show it: four decimals, "-" for none."""
    return "-" if value is None else f"{value:.{digits}f}"


class ProgressLines:
    """`dask_dane.train`'s display: one line as it starts, one per round, one at the end.

    Lines rather than a live bar: rich prints them alike in a terminal, a log file and
    Jupyter (where its live bar needs ipywidgets), and each round stays on screen. `dane
    train`'s bar (cli/console.py) is one with the rounds' lines drawn as a bar instead.
    """

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        # stderr, as progress goes in a terminal: a script's own stdout stays its own.
        self.console = console or Console(stderr=True, highlight=False)
        self.rounds = 0
        self.held = ""  # how the workers hold the shards (--shard-memory as resolved)
        self.batch_size = 0  # --batch-size, for noise_warning (begin sets it)
        self.warned = False  # noise_warning's line is printed once
        self.collapse: CollapseWatch | None = None  # begin sets it, with the run's settings

    def begin(self, config: RunConfig, *, resume: bool, strategy: Strategy | None = None) -> None:
        """Before the cluster starts: it takes seconds, and silence reads as a hang.
        `strategy`: the run's, whose settings a collapse's warning names (collapse.advice)."""
        self.rounds, self.batch_size = config.rounds, config.batch_size
        self.collapse = CollapseWatch(advice(config, strategy))
        verb = "resuming" if resume else "training"
        self._print(
            f"dask-dane: {verb} {config.algorithm} for {plural(config.rounds, 'round')} into "
            f"{config.out}"
        )

    def note(self, text: str) -> None:
        """A line of its own (a warning before the run, a resume with nothing left, the
        engine's notes: Callbacks.on_note)."""
        self._print(text)

    def callbacks(self) -> Callbacks:
        return Callbacks(
            on_start=self.on_start,
            on_round=self.on_round,
            on_shards=self.on_shards,
            on_note=self.note,
        )

    def on_shards(self, held: str) -> None:
        self.held = held  # said with the workers (startup_lines)

    def on_start(self, dashboard: str, workers: int) -> None:
        for line in startup_lines(dashboard, workers, self.held):  # as `dane train` says them
            self._print(f"dask-dane: {line}")

    def on_round(self, row: dict[str, Any]) -> None:
        width = len(str(self.rounds or row["round"]))
        parts = [
            f"round {row['round']:>{width}}/{self.rounds or '?'}",
            f"train loss {number(row.get('train_loss'))}",
        ]
        if row.get("val_accuracy") is not None:  # where a validation split selects
            parts.append(f"val acc {number(row['val_accuracy'])}")
        if row.get("test_accuracy") is not None or row.get("test_loss") is None:
            parts.append(f"test acc {number(row.get('test_accuracy'))}")
        else:  # a regression task: no accuracy, the test loss says how it goes
            parts.append(f"test loss {number(row['test_loss'])}")
        parts.append(f"{row.get('wall_s', 0.0):.1f} s")
        self._print("  ".join(parts))
        self.warn(row)

    def warn(self, row: dict[str, Any]) -> None:
        """noise_warning's line after the round's own, the first time the run has one; a
        collapse's (collapse.py), the first time a round collapses."""
        line = None if self.warned else noise_warning(row, self.batch_size)
        if line is not None:
            self.warned = True
            self._print(line)
        collapsed = self.collapse.feed(row) if self.collapse is not None else None
        if collapsed is not None:
            self._print(collapsed)

    def end(self, summary: dict[str, Any], run_dir: object) -> None:
        accuracy = summary.get("final_test_accuracy")
        result = "" if accuracy is None else f", test accuracy {accuracy:.4f}"
        self._print(f"dask-dane: done after {plural(summary.get('rounds'), 'round')}{result}")
        self._print(f"dask-dane: run directory {run_dir}")

    def _print(self, text: str) -> None:
        # markup=False: a run directory or a dashboard URL may hold [brackets].
        # soft_wrap: a long path is wrapped by the terminal, not broken by a newline.
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def plural(count: int | None, noun: str) -> str:
    """'1 round', '3 rounds'; '? rounds' for an unknown count."""
    if count is None:
        return f"? {noun}s"
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def selection_line(summary: dict[str, Any]) -> str:
    """Which round best.pt holds and what chose it (summary.json's selection fields)."""
    if summary.get("best_round") is None:
        return "best.pt: no evaluated round"
    accuracy = summary.get("test_accuracy_at_best")
    tested = "" if accuracy is None else f", test accuracy there {accuracy:.4f}"
    if summary.get("selected_on") == "validation":
        return f"best.pt: round {summary['best_round']}, the best on the validation split{tested}"
    return (
        f"best.pt: round {summary['best_round']}, the last round (no validation split: "
        f"--val-fraction is 0){tested}"
    )
