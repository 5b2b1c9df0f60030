"""Per-round metrics: the row of a round, built in one place, and the run's JSONL file.

The running totals a row writes are counted by RunState.advance, which returns the run
itself; what only the Dask driver knows about a round (attempts, shards reloaded, its bytes)
it adds itself.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..protocol import Strategy
from ..round.comm import driver_bytes
from ..round.tasks import RoundResult
from .checkpoint import atomic_write_bytes

if TYPE_CHECKING:  # types only
    from ..plan import RunSetup


def round_row(
    *,
    round_index: int,
    strategy: Strategy,
    result: RoundResult,
    evaluation: dict[str, float] | None,
    wall_s: float,
    totals: Any,
    driver: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A round's metrics.jsonl line (the Dask driver's and the reference runner's alike).

    `totals` is the RunState after this round (RunState.advance returns it; typed Any, as in
    summary), its rows those before it: round_row writes its totals and computes none of
    them, so they are counted in one place. `driver` adds what only the Dask driver knows
    (attempts, shards reloaded, the collective, its own bytes).
    """
    metrics, compute = result.metrics, sorted(result.compute_by_worker.values())
    scores, previous = evaluation or {}, totals.rows[-1] if totals.rows else None
    # Every line has these keys, in this order, None where unknown (docs/reference/formats.md).
    row: dict[str, Any] = {
        "round": round_index,
        "algorithm": strategy.name,
        "train_loss": metrics.get("train_loss"),
        # The validation rows select the model; the test split is only reported.
        "val_loss": scores.get("val_loss"),
        "val_accuracy": scores.get("val_accuracy"),
        "test_loss": evaluation["loss"] if evaluation else None,
        "test_accuracy": scores.get("accuracy"),
        "grad_norm": metrics.get("grad_norm"),
        "wall_s": wall_s,
        "max_worker_compute_s": compute[-1],
        "comm_bytes": result.comm_bytes,
        "cum_comm_bytes": totals.cum_comm_bytes,
        "comm_rounds": totals.cum_comm_rounds,
        # Not in comm_bytes: the driver's own traffic (comm.driver_bytes).
        "driver_bytes": driver_bytes(result.weights, result.state, result.shard_states),
        # Rows of training data the round's work read, all shards together: its compute.
        "images": result.rows,
        "cum_images": totals.cum_images,
        # Beyond the required fields: straggler view and cluster size of this round.
        "median_worker_compute_s": statistics.median(compute),
        "slowest_worker": max(result.compute_by_worker, key=result.compute_by_worker.get),
        "worker_compute_s": dict(sorted(result.compute_by_worker.items())),
        "num_workers": len(compute),
        # Inside wall_s: benchmarks that time training alone subtract it.
        "eval_s": scores.get("eval_s"),
        # The schedules' rates and steps, and the gradient noise scale: the algorithm says.
        **strategy.row_figures(round_index, metrics, previous),
    }
    # The strategy's own figures (DANE: safeguard_rejected, mu, grad_rows), as it names them;
    # names with a leading underscore are sums for the reduction, not figures.
    row.update({k: v for k, v in metrics.items() if k not in row and not k.startswith("_")})
    if result.diagnostics:  # each shard's own figures (algorithms/parts/local_problem.py)
        row["shards"] = [{"shard": i, **f} for i, f in sorted(result.diagnostics.items())]
    # is_best: the round selected so far (RunState.is_best); then what the driver adds.
    return row | {"is_best": totals.is_best} | (driver or {})


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


def keep_rounds_up_to(path: Path, last_round: int) -> tuple[list[dict[str, Any]], int]:
    """Drop lines after `last_round` (written after the last checkpoint before a crash);
    the rows kept, and how many were dropped."""
    rows = read_metrics(path)
    kept = [row for row in rows if row["round"] <= last_round]
    text = "".join(json.dumps(row) + "\n" for row in kept)
    atomic_write_bytes(path, lambda handle: handle.write(text.encode()))
    return kept, len(rows) - len(kept)


def append_metrics(path: Path, row: dict[str, Any]) -> None:
    """Append one round's line and flush it to disk."""
    with open(path, "a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def summary(setup: RunSetup, state: Any) -> dict[str, Any]:
    """summary.json: the run's last metrics, best accuracy, selected model and totals, from
    `state`, a RunState (typed Any: run_state.py imports this module, and the module graph
    has no cycle, type-only imports included)."""
    rows = state.rows
    last = rows[-1] if rows else {}
    return {
        "algorithm": setup.strategy.name,
        "model": setup.config.model,
        "store": setup.store.path,
        "rounds": state.round,
        "final_train_loss": last.get("train_loss"),
        "final_test_loss": last.get("test_loss"),
        "final_test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": None if state.best_accuracy == -math.inf else state.best_accuracy,
        # The selected model (best.pt): its round, what selected it, and its test accuracy.
        "best_round": state.best_round or None,
        "selected_on": "validation" if state.best_score > -math.inf else "last round",
        "test_accuracy_at_best": state.test_accuracy_at_best,
        "total_wall_s": sum(r["wall_s"] for r in rows),
        "total_comm_bytes": state.cum_comm_bytes,
        "total_comm_rounds": state.cum_comm_rounds,
        "total_images": state.cum_images,
        "num_parameters": int(state.weights.numel()),
    }
