"""The run directory: config.toml, metrics.jsonl, checkpoints/, summary.json (see
docs/architecture.md section 3)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..setup.config import IDENTITY_KEYS, RunConfig, read_toml, to_toml
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

    def final_weights(self) -> Any:
        """The latest checkpoint's flat weights (a torch tensor)."""
        return load_checkpoint(self.latest)["weights"]

    def holds_run(self) -> bool:
        """True once a run has finished a round here (a checkpoint or a metrics line)."""
        return self.latest.exists() or bool(read_metrics(self.metrics))

    def saved_config(self) -> dict[str, Any]:
        """The settings a run was started with (for --resume)."""
        if not self.config.exists():
            raise ValueError(f"{self.root} holds no run to resume (no config.toml); drop --resume")
        return read_toml(self.config)

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

    def write_config(self, config: RunConfig) -> None:
        atomic_write_bytes(self.config, lambda h: h.write(to_toml(config).encode()))

    def write_summary(self, summary: dict[str, Any]) -> None:
        text = json.dumps(summary, indent=2) + "\n"
        atomic_write_bytes(self.summary, lambda h: h.write(text.encode()))


def check_same_run(saved: dict[str, Any], config: RunConfig) -> None:
    """--resume must continue the same training: same store, model, algorithm, seed, dtype."""
    for key in IDENTITY_KEYS:
        if key in saved and saved[key] != getattr(config, key):
            raise ValueError(
                f"--resume: this run directory was made with {key} = {saved[key]!r}, not "
                f"{getattr(config, key)!r}; resume with the same {key} or choose another --out"
            )
