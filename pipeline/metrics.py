"""Per-round metrics: the JSONL file of a run directory (one object per round)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .checkpoint import atomic_write_bytes

# The fields every metrics.jsonl line has, in this order (DESIGN.md section 3).
FIELDS = (
    "round",
    "algorithm",
    "train_loss",
    "test_loss",
    "test_accuracy",
    "grad_norm",
    "wall_s",
    "max_worker_compute_s",
    "comm_bytes",
    "cum_comm_bytes",
    "comm_rounds",
)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All complete lines of a metrics file (a torn last line from a crash is skipped)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def keep_rounds_up_to(path: Path, last_round: int) -> list[dict[str, Any]]:
    """Drop lines after `last_round` (written after the last checkpoint before a crash)."""
    rows = [row for row in read_metrics(path) if row["round"] <= last_round]
    text = "".join(json.dumps(row) + "\n" for row in rows)
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))
    return rows


def append_metrics(path: Path, row: dict[str, Any]) -> None:
    """Append one round's line and flush it to disk."""
    with open(path, "a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
