"""Where a run stands between rounds: start or resume it, advance it, save it, sum it up.

The driver (loop.py) calls these around each round; all of it is plain Python on the driver:
checkpoints (checkpoint.py, atomic), the metrics row (metrics.py) and the run's summary.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from .checkpoint import load_checkpoint, remove_partial_writes, save_checkpoint
from .config import RunConfig
from .errors import TrainingDiverged
from .metrics import FIELDS, keep_rounds_up_to
from .rundir import RunDir
from .setup import RunSetup, initial_weights


@dataclass
class Progress:
    """Where a run stands; what a checkpoint holds besides the weights."""

    round: int = 0
    weights: torch.Tensor | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_accuracy: float = -math.inf
    cum_comm_bytes: float = 0.0
    cum_comm_rounds: int = 0
    shard_states: list[dict[str, torch.Tensor]] | None = None  # algorithms/base.py; None: none


def start_progress(setup: RunSetup, run_dir: RunDir, *, resume: bool) -> Progress:
    """A fresh Progress, or the one saved in the run directory's latest checkpoint."""
    if not resume and run_dir.holds_run():
        raise ValueError(
            f"{run_dir.root} already holds a run; pass --resume to continue it or choose "
            "another --out"
        )
    run_dir.check_writable()
    run_dir.write_config(setup.config)
    if resume and run_dir.latest.exists():
        remove_partial_writes(run_dir.latest.parent)  # a checkpoint write cut by a kill
        saved = load_checkpoint(run_dir.latest)
        keep_rounds_up_to(run_dir.metrics, saved["round"])
        return Progress(
            round=saved["round"],
            weights=saved["weights"],
            state=saved["state"],
            best_accuracy=saved["best_accuracy"],
            cum_comm_bytes=saved["cum_comm_bytes"],
            cum_comm_rounds=saved["cum_comm_rounds"],
            shard_states=saved.get("shard_states"),
        )
    keep_rounds_up_to(run_dir.metrics, 0)
    weights = initial_weights(setup.spec, setup.config.seed)
    shard_states = [setup.strategy.init_shard_state(weights) for _ in setup.store.shards]
    return Progress(
        weights=weights,
        state=setup.strategy.init_state(weights),
        shard_states=shard_states if any(shard_states) else None,
    )


def metrics_row(setup, progress, t, result, evaluation, wall_s) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    m = result.metrics
    compute = sorted(result.compute_by_worker.values())
    row: dict[str, Any] = {
        "round": t,
        "algorithm": setup.strategy.name,
        "train_loss": m.get("train_loss"),
        "test_loss": evaluation["loss"] if evaluation else None,
        "test_accuracy": evaluation.get("accuracy") if evaluation else None,
        "grad_norm": m.get("grad_norm"),
        "wall_s": wall_s,
        "max_worker_compute_s": m["max_worker_compute_s"],
        "comm_bytes": int(m["comm_bytes"]),
        "cum_comm_bytes": int(progress.cum_comm_bytes + m["comm_bytes"]),
        "comm_rounds": progress.cum_comm_rounds + int(m["comm_phases"]),
        # Beyond the required fields: straggler view and cluster size of this round.
        "median_worker_compute_s": statistics.median(compute),
        "num_workers": len(compute),
        # Inside wall_s: benchmarks that time training alone subtract it.
        "eval_s": evaluation.get("eval_s") if evaluation else None,
    }
    # Strategy-specific extras: DANE's safeguard decisions, adapted mu, gradient sample size.
    row.update({k: m[k] for k in ("safeguard_rejected", "mu", "grad_rows") if k in m})
    accuracy = row["test_accuracy"]
    row["is_best"] = accuracy is not None and accuracy > progress.best_accuracy
    assert set(FIELDS) <= set(row)
    return row


def check_finite(result, row, run_dir) -> None:  # type: ignore[no-untyped-def]
    loss = row["train_loss"]
    if not bool(torch.isfinite(result.weights).all()) or (
        loss is not None and not math.isfinite(loss)
    ):
        kept = (
            f"the last good checkpoint (round {row['round'] - 1}) is kept in {run_dir.latest}"
            if row["round"] > 1
            else "no round finished, so no checkpoint is kept"
        )
        raise TrainingDiverged(
            f"training diverged in round {row['round']}: loss or weights are not finite "
            f"(train_loss={loss}); {kept}; try a larger --mu or a smaller --local-lr"
        )


def advance(progress: Progress, result, row: dict[str, Any], t: int) -> None:  # type: ignore[no-untyped-def]
    progress.round = t
    progress.weights = result.weights
    progress.state = result.state
    if result.shard_states is not None:
        progress.shard_states = result.shard_states
    progress.cum_comm_bytes = row["cum_comm_bytes"]
    progress.cum_comm_rounds = row["comm_rounds"]
    if row["is_best"]:
        progress.best_accuracy = row["test_accuracy"]


def save_progress(
    run_dir: RunDir, progress: Progress, config: RunConfig, *, improved: bool
) -> None:
    payload = {
        "round": progress.round,
        "weights": progress.weights,
        "state": progress.state,
        "best_accuracy": progress.best_accuracy,
        "cum_comm_bytes": progress.cum_comm_bytes,
        "cum_comm_rounds": progress.cum_comm_rounds,
        "shard_states": progress.shard_states,
        "config": config.as_dict(),
    }
    save_checkpoint(run_dir.latest, payload)
    if improved:
        save_checkpoint(run_dir.best, payload)


def summary(setup: RunSetup, run_dir: RunDir, progress: Progress) -> dict[str, Any]:
    from .metrics import read_metrics

    rows = read_metrics(run_dir.metrics)
    last = rows[-1] if rows else {}
    return {
        "algorithm": setup.strategy.name,
        "model": setup.config.model,
        "store": setup.store.path,
        "rounds": progress.round,
        "final_train_loss": last.get("train_loss"),
        "final_test_loss": last.get("test_loss"),
        "final_test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": None
        if progress.best_accuracy == -math.inf
        else progress.best_accuracy,
        "total_wall_s": sum(r["wall_s"] for r in rows),
        "total_comm_bytes": progress.cum_comm_bytes,
        "total_comm_rounds": progress.cum_comm_rounds,
        "num_parameters": int(progress.weights.numel()) if progress.weights is not None else None,
    }
