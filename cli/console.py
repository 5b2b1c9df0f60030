"""What `dane` shows in the terminal while it works: the progress bar of `dane train`, and
nothing of the cluster's own logs (they go to the run directory)."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..pipeline.engine.run.rundir import RunDir
from ..pipeline.launchers.cluster_checks import LOG_FORMAT, restore_logs, route_cluster_logs
from ..pipeline.observe.collapse import CollapseWatch, advice
from ..pipeline.observe.progress import ProgressLines, number, startup_lines
from .watch import PACE_ROUNDS, eta

if TYPE_CHECKING:
    from ..pipeline.engine.protocol import Strategy
    from ..pipeline.setup.config import RunConfig


class TrainingProgress(ProgressLines):
    """ProgressLines with a rich progress bar for the rounds: round, train loss, test accuracy,
    ETA (`dane watch`'s: the latest rounds' pace, none until a round after this process's
    first). The start-up lines (startup_lines), the noise-scale and collapse warnings are
    ProgressLines'."""

    def __init__(
        self, config: RunConfig, strategy: Strategy | None = None, *, resume: bool = False
    ) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        super().__init__()
        self.rounds, self.batch_size = config.rounds, config.batch_size
        self.out, self.resume = config.out, resume
        self.collapse = CollapseWatch(advice(config, strategy))  # the run's mu, resolved
        self.bar = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}"),
            # Not rich's TimeRemainingColumn: its pace is the time between updates over the
            # last 30 s, so rounds longer than that never had an ETA.
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
        )
        self.task = self.bar.add_task("train", total=config.rounds, loss="-", acc="-", eta="-")
        self.rows: list[dict[str, Any]] = []  # the latest rounds: the ETA's pace
        self.first: int | None = None  # the first round this process ran

    def __enter__(self) -> TrainingProgress:
        return self  # the bar starts with the first round: errors before it print alone

    def __exit__(self, *exc: object) -> None:
        if self.bar.live.is_started:  # stop() of a bar never started prints an empty line
            # Ctrl-C between a round's record and its callback left the bar a round behind
            # what the run kept (and the interrupt line says): its last frame shows that.
            recorded = RunDir(Path(self.out)).rounds_recorded()
            if recorded > self.bar.tasks[0].completed:
                self.bar.update(self.task, completed=recorded)
            self.bar.stop()

    def on_start(self, dashboard: str, workers: int) -> None:
        # The run folder first: without --out it is a fresh one each run, named here. A
        # resume says where it starts; metrics.jsonl holds its rounds up to the checkpoint
        # it continues from by now (the driver dropped any past it), and the bar starts there.
        done = RunDir(Path(self.out)).rounds_recorded() if self.resume else 0
        if done:
            self._print(f"resuming {self.out} after round {done} of {self.rounds}")
            self.bar.reset(self.task, completed=done)  # the bar from `done`, not from 0
        else:
            self._print(f"run folder: {self.out}")
        self._print(f"watch it with: dane watch {shlex.quote(str(self.out))}")  # elsewhere
        for line in startup_lines(dashboard, workers, self.held):  # short, one thing each
            self._print(line)
        self.bar.start()

    def on_round(self, row: dict[str, Any]) -> None:
        loss, acc = number(row["train_loss"]), number(row["test_accuracy"])
        # This process's first round holds its start-up (a fresh run's round 1, a resume's
        # first): the pace is the rounds after it (watch.FIRST_ROUNDS).
        self.first = row["round"] if self.first is None else self.first
        self.rows = [*self.rows[-PACE_ROUNDS:], row]
        left = eta(self.rows, self.rounds, first=(self.first,))
        self.bar.update(self.task, completed=row["round"], loss=loss, acc=acc, eta=left)
        self.warn(row)


class RunDirLog(logging.Handler):
    """Records into RUN_DIR/cluster.log once the run directory exists (held until then, so
    that a run refused before it starts writes nothing)."""

    HELD = 1000  # records kept while the run directory does not exist yet

    def __init__(self, run_dir: Path) -> None:
        super().__init__(logging.INFO)
        self.path = run_dir / "cluster.log"
        self.held: list[str] = []
        self.stream: Any = None
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record) + "\n"
        if self.stream is None:
            if not self.path.parent.is_dir():
                self.held = [*self.held[-self.HELD :], text]
                return
            self.stream = self.path.open("a")
            self.stream.writelines(self.held)
            self.held = []
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        super().close()


@contextmanager
def quiet_cluster_logs(run_dir: Path) -> Iterator[None]:
    """The in-process scheduler's, Tornado's and Bokeh's logs go to RUN_DIR/cluster.log,
    not the terminal: a browser closing a dashboard page made Bokeh print a 30-line
    traceback between the progress bar's updates. Our own one-line errors are unaffected.
    The loggers are the ones the workers route too (pipeline/launchers/cluster_checks.py)."""
    handler = RunDirLog(run_dir)
    saved = route_cluster_logs(handler)
    try:
        yield
    finally:
        restore_logs(saved)
        handler.close()
