"""What `dane train` says around a run: the result line scripts read, the line that tells
how to continue an interrupted run, and the note for a resumed run that had nothing left."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any

from ..pipeline.engine.run.rundir import RunDir
from ..pipeline.observe.progress import plural

EXIT_INTERRUPTED = 130  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)


def rounds(count: int) -> str:
    return plural(count, "round")


def result_line(summary: dict[str, Any], out: str) -> str:
    """The last line of `dane train`: the algorithm, its rounds, the test accuracy, the run."""
    accuracy = summary["final_test_accuracy"]
    head = f"{summary['algorithm']}: {rounds(summary['rounds'])}"
    if accuracy is None:
        return f"{head}; run in {out}"
    return (
        f"{head}, test accuracy {accuracy:.4f}, {summary['total_wall_s']:.1f} s in rounds; "
        f"run in {out}"
    )


def interrupted_line(out: str) -> str:
    """After Ctrl-C: what was kept, and the command that continues the run."""
    done = RunDir(Path(out)).rounds_recorded()
    if done == 0:
        return "interrupted before the first round finished; nothing was kept"
    return f"interrupted after {rounds(done)}; continue with: dane train --resume --out {out}"


class InterruptWatch:
    """Notes a Ctrl-C (SIGINT) while it is entered, then interrupts as Python does: the
    terminal sends it to the workers too, so the error that reaches `dane train` may be a
    lost worker rather than KeyboardInterrupt; `seen` tells the two apart."""

    def __init__(self) -> None:
        self.seen = False
        self._before: Any = None

    def _interrupted(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        signal.default_int_handler(signum, frame)

    def __enter__(self) -> InterruptWatch:
        self._before = signal.signal(signal.SIGINT, self._interrupted)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._before)
