"""The run directory: config.toml, metrics.jsonl, checkpoints/, summary.json (see
docs/reference/formats.md). config.toml is read and written by setup/run_file.py: the engine
writes the rounds, the checkpoints and the summary."""

from __future__ import annotations

import json
import os
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
