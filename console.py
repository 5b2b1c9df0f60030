"""What `dane` shows in the terminal while it works: the progress bar of `dane train`."""

from __future__ import annotations

from typing import Any


class TrainingProgress:
    """A rich progress bar: round, train loss, test accuracy, ETA."""

    def __init__(self, rounds: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task = self.bar.add_task("train", total=rounds, loss="-", acc="-")

    def __enter__(self) -> TrainingProgress:
        return self  # the bar starts with the first round: errors before it print alone

    def __exit__(self, *exc: object) -> None:
        if self.bar.live.is_started:  # stop() of a bar never started prints an empty line
            self.bar.stop()

    def callbacks(self):  # type: ignore[no-untyped-def]
        from .pipeline.loop import Callbacks

        def on_start(dashboard: str, workers: int) -> None:
            self.console.print(f"dashboard: {dashboard}  ({workers} workers)")
            if dashboard.endswith("/status"):  # the run's own page, beside Dask's
                self.console.print(f"DANE page: {dashboard.removesuffix('/status')}/dane")
            self.bar.start()

        def on_round(row: dict[str, Any]) -> None:
            loss = row["train_loss"]
            acc = row["test_accuracy"]
            self.bar.update(
                self.task,
                completed=row["round"],
                loss=f"{loss:.4f}" if loss is not None else "-",
                acc=f"{acc:.4f}" if acc is not None else "-",
            )

        return Callbacks(on_start=on_start, on_round=on_round)
