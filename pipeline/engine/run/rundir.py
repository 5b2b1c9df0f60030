"""The run directory: config.toml, metrics.jsonl, checkpoints/, summary.json (see
docs/reference/formats.md). config.toml is read and written by setup/run_file.py: the engine
writes the rounds, the checkpoints and the summary."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint import atomic_write_bytes, load_checkpoint
from .metrics import read_metrics


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def latest(self) -> Path:
        return self.root / "checkpoints" / "latest.pt"

    @property
    def best(self) -> Path:
        return self.root / "checkpoints" / "best.pt"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def rows(self) -> list[dict[str, Any]]:
        """The run's metrics rows, one a round, in order."""
        return read_metrics(self.metrics)

    def rounds_recorded(self) -> int:
        """The last round with a metrics row (0: none yet, or no run here)."""
        rows = self.rows()
        return rows[-1]["round"] if rows else 0

    def final_weights(self) -> Any:
        """The latest checkpoint's flat weights (a torch tensor)."""
        return load_checkpoint(self.latest)["weights"]

    def check_usable(self, *, resume: bool) -> None:
        """ValueError where a new run (not `resume`) would overwrite one that finished a
        round here, or where the directory cannot be created or written."""
        if not resume and (self.latest.exists() or read_metrics(self.metrics)):
            raise ValueError(
                f"{self.root} already holds a run; pass --resume to continue it or choose "
                "another --out"
            )
        self.check_writable()

    @contextlib.contextmanager
    def claimed(self) -> Iterator[None]:
        """The directory created and held by this run until it ends: ValueError where another
        run holds it (two `dane train` given one --out, or started at once and numbered the
        same). An advisory lock on the directory itself (flock), so nothing is written into
        it, and the kernel lifts it when the holder dies: a killed driver's run resumes."""
        self.check_writable()
        handle = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by children
        try:
            _lock(handle, self.root)
            yield
        finally:
            os.close(handle)  # lifts the lock

    def check_writable(self) -> None:
        """Create the directory, or say why it cannot be written."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise ValueError(
                f"cannot write to run directory {self.root} ({err.strerror}); choose another --out"
            ) from None

    def write_summary(self, summary: dict[str, Any]) -> None:
        text = json.dumps(summary, indent=2) + "\n"
        atomic_write_bytes(self.summary, lambda h: h.write(text.encode()))


def _lock(handle: int, root: Path) -> None:
    try:
        import fcntl
    except ImportError:  # no flock (Windows): runs are not guarded against each other
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(
            f"{root} is in use by another run that has not ended; wait for it to end, or "
            "choose another --out"
        ) from None
    except OSError:  # a file system without locks (some network mounts): run unguarded
        return
