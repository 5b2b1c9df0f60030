"""Per-round metrics: the row of a round, built in one place, and the run's JSONL file."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Protocol

from .checkpoint import atomic_write_bytes
from .comm import driver_bytes
from .tasks import RoundResult


class RunTotals(Protocol):
    """A run's running totals, as RunState keeps them."""

    cum_comm_bytes: int
    cum_comm_rounds: int
    cum_images: int
    best_accuracy: float


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


def round_row(
    *,
    round_index: int,
    algorithm: str,
    result: RoundResult,
    evaluation: dict[str, float] | None,
    wall_s: float,
    totals: RunTotals,
    driver: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A round's metrics.jsonl line (the Dask driver's and the reference runner's alike).

    `totals` are the run's before this round (a RunState); `driver` adds what only the Dask
    driver knows (attempts, where its time went).
    """
    metrics, compute = result.metrics, sorted(result.compute_by_worker.values())
    accuracy = evaluation.get("accuracy") if evaluation else None
    row: dict[str, Any] = {
        "round": round_index,
        "algorithm": algorithm,
        "train_loss": metrics.get("train_loss"),
        "test_loss": evaluation["loss"] if evaluation else None,
        "test_accuracy": accuracy,
        "grad_norm": metrics.get("grad_norm"),
        "wall_s": wall_s,
        "max_worker_compute_s": compute[-1],
        "comm_bytes": result.comm_bytes,
        "cum_comm_bytes": totals.cum_comm_bytes + result.comm_bytes,
        "comm_rounds": totals.cum_comm_rounds + result.comm_phases,
        # Not in comm_bytes: the driver's own traffic (comm.driver_bytes).
        "driver_bytes": driver_bytes(result.weights, result.state, result.shard_states),
        # Rows of training data the round's work read, all shards together: its compute.
        "images": result.rows,
        "cum_images": totals.cum_images + result.rows,
        # Beyond the required fields: straggler view and cluster size of this round.
        "median_worker_compute_s": statistics.median(compute),
        "slowest_worker": max(result.compute_by_worker, key=result.compute_by_worker.get),
        "worker_compute_s": dict(sorted(result.compute_by_worker.items())),
        "num_workers": len(compute),
        # Inside wall_s: benchmarks that time training alone subtract it.
        "eval_s": evaluation.get("eval_s") if evaluation else None,
    }
    # The strategy's own figures (DANE: safeguard_rejected, mu, grad_rows), as it names them.
    row.update({k: v for k, v in metrics.items() if k not in row})
    if result.diagnostics:  # each shard's own figures (algorithms/diagnostics.py)
        row["shards"] = [{"shard": i, **f} for i, f in sorted(result.diagnostics.items())]
    row["is_best"] = accuracy is not None and accuracy > totals.best_accuracy
    row.update(driver or {})
    return row


def reached_target(target: float, row: dict[str, Any]) -> bool:
    """--stop-at-accuracy: this round's evaluation reached it (a round without one never does)."""
    accuracy = row.get("test_accuracy")
    return target > 0 and accuracy is not None and accuracy >= target


class Laps:
    """Named laps of the driver's time in a round (seconds), for the metrics row."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


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
