"""The run directory: config.toml, metrics.jsonl, checkpoints/, summary.json (see
docs/reference/formats.md)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...setup.config import RunConfig, read_record, to_toml
from ...setup.resumed import Resume, RunRecord, add_resume, check_same_run
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

    def saved_config(self) -> dict[str, Any]:
        """The settings the run's latest rounds ran with (for --resume): those it was started
        with, and what each resume changed."""
        return self.record().effective

    def record(self) -> RunRecord:
        """config.toml as written: the original settings and the resumes (setup/resumed.py).

        A file without val_fraction was written before the validation split existed: that run
        trained on every row, so it reads as 0. Today's default would hold rows out of the
        resumed rounds unnoticed, and refuse `--val-fraction 0` as a change of the run. A file
        without shard_memory was written when resident was the default: it resumes resident,
        as it trained (auto could stream, and streamed minibatches are other draws). Only
        here, not in read_record: a --config file that leaves them out means the defaults.
        """
        if not self.config.exists():
            raise ValueError(f"{self.root} holds no run to resume (no config.toml); drop --resume")
        record = read_record(self.config)
        before = {"val_fraction": 0.0, "shard_memory": "resident"}
        missing = {key: value for key, value in before.items() if key not in record.original}
        return dataclasses.replace(record, original={**missing, **record.original})

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

    def write_config(
        self, config: RunConfig, *, resumed_after: int = 0, notes: tuple[str, ...] = ()
    ) -> None:
        """config.toml for a run starting with `config`. A resume after round N > 0 keeps the
        file's original settings and adds what it changes as a [[resumed]] table; after no
        round, no round ran with the old settings, and the file starts afresh. `notes`:
        comments after the settings, what the driver decided that no setting says."""
        text = to_toml(config)
        if resumed_after and self.config.exists():
            record = self.record()
            resume = Resume(resumed_after, check_same_run(record.effective, config))
            text = to_toml(record.original, resumed=add_resume(record.resumes, resume))
        text += "".join(f"# {line}\n" for line in notes)
        atomic_write_bytes(self.config, lambda h: h.write(text.encode()))

    def notes_starting(self, start: str) -> tuple[str, ...]:
        """config.toml's comment lines (write_config's `notes`) that begin with `start`, without
        the `# `: what a resume writes again (the K a run chose as it started)."""
        if not self.config.exists():
            return ()
        lines = self.config.read_text().splitlines()
        return tuple(line[2:] for line in lines if line.startswith(f"# {start}"))

    def write_summary(self, summary: dict[str, Any]) -> None:
        text = json.dumps(summary, indent=2) + "\n"
        atomic_write_bytes(self.summary, lambda h: h.write(text.encode()))
