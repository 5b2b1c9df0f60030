"""The driver: for each round, build its graph, compute it, record metrics, checkpoint.

Per round the client sends the current weights (and strategy state) once, receives the new
weights and the round's metrics, and releases the round's futures. Shards are loaded once per
run by tasks pinned to their workers and stay there; only weights, gradients and metrics move.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from distributed import Client

from dask_dane.pipeline import tasks
from dask_dane.pipeline.checkpoint import load_checkpoint, save_checkpoint
from dask_dane.pipeline.cluster import make_client, worker_addresses
from dask_dane.pipeline.config import RunConfig
from dask_dane.pipeline.graph import RoundPlan, build_round
from dask_dane.pipeline.metrics import FIELDS, append_metrics, keep_rounds_up_to
from dask_dane.pipeline.rundir import RunDir
from dask_dane.pipeline.setup import RunSetup, initial_weights, prepare_run

# A round whose tasks fail because a worker died is run again from the same weights and
# seeds (so the result is unchanged); after this many failures in one round the run stops.
MAX_ROUND_ATTEMPTS = 3


class TrainingDiverged(ValueError):
    """Loss or weights stopped being finite; the last good checkpoint is kept."""


@dataclass
class Progress:
    """Where a run stands; what a checkpoint holds besides the weights."""

    round: int = 0
    weights: torch.Tensor | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_accuracy: float = -math.inf
    cum_comm_bytes: float = 0.0
    cum_comm_rounds: int = 0


@dataclass
class Callbacks:
    on_start: Callable[[str, int], None] = lambda dashboard, workers: None
    on_round: Callable[[dict[str, Any]], None] = lambda row: None


def train(
    config: RunConfig,
    *,
    resume: bool = False,
    callbacks: Callbacks | None = None,
    client: Client | None = None,
) -> dict:
    """Train as configured (or continue a run); returns the summary written to summary.json.

    With `client` given (benchmarks running many trainings) that cluster is used as it is;
    otherwise one is started or connected to as the config says, and closed at the end.
    """
    callbacks = callbacks or Callbacks()
    setup = prepare_run(config)  # all checks before anything is written
    run_dir = RunDir(Path(config.out))
    progress = _start(setup, run_dir, resume=resume)
    if progress.round < config.rounds:
        with nullcontext(client) if client else make_client(config) as active:
            workers = worker_addresses(active)
            callbacks.on_start(active.dashboard_link, len(workers))
            _run_rounds(active, setup, run_dir, progress, workers, callbacks)
    summary = _summary(setup, run_dir, progress)
    run_dir.write_summary(summary)
    return summary


def _start(setup: RunSetup, run_dir: RunDir, *, resume: bool) -> Progress:
    """A fresh Progress, or the one saved in the run directory's latest checkpoint."""
    if not resume and run_dir.holds_run():
        raise ValueError(
            f"{run_dir.root} already holds a run; pass --resume to continue it or choose "
            "another --out"
        )
    run_dir.check_writable()
    run_dir.write_config(setup.config)
    if resume and run_dir.latest.exists():
        saved = load_checkpoint(run_dir.latest)
        keep_rounds_up_to(run_dir.metrics, saved["round"])
        return Progress(
            round=saved["round"],
            weights=saved["weights"],
            state=saved["state"],
            best_accuracy=saved["best_accuracy"],
            cum_comm_bytes=saved["cum_comm_bytes"],
            cum_comm_rounds=saved["cum_comm_rounds"],
        )
    keep_rounds_up_to(run_dir.metrics, 0)
    weights = initial_weights(setup.spec, setup.config.seed)
    return Progress(weights=weights, state=setup.strategy.init_state(weights))


def _load_shards(client: Client, setup: RunSetup, workers: list[str], token: str):  # type: ignore[no-untyped-def]
    """One pinned load task per shard (shard i on worker i mod W); the test split on worker 0.

    The futures are held for the whole run, so each shard stays in its worker's memory. If a
    worker dies, Dask reruns the load task elsewhere: zarr on disk is the source of truth.
    """
    placement = [workers[i % len(workers)] for i in range(setup.store.num_shards)]
    shards = [
        client.submit(
            tasks.load_shard,
            key=f"load_shard-{i}-{token}",
            workers=[worker],
            allow_other_workers=True,
            **setup.shard_args(i),
        )
        for i, worker in enumerate(placement)
    ]
    test = client.submit(
        tasks.load_shard,
        key=f"load_test-{token}",
        workers=[workers[0]],
        allow_other_workers=True,
        **setup.test_args(),
    )
    return shards, placement, test


def _run_rounds(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    progress: Progress,
    workers: list[str],
    callbacks: Callbacks,
) -> None:
    config = setup.config
    token = uuid.uuid4().hex[:8]
    shards, placement, test = _load_shards(client, setup, workers, token)
    for t in range(progress.round + 1, config.rounds + 1):
        evaluate = t % config.eval_every == 0 or t == config.rounds
        started = time.perf_counter()
        result, evaluation, attempts = _compute_round(
            client, setup, progress, t, shards, placement, test if evaluate else None, token
        )
        row = _metrics_row(setup, progress, t, result, evaluation, time.perf_counter() - started)
        row["attempts"] = attempts
        _check_finite(result, row, run_dir)
        _advance(progress, result, row, t)
        append_metrics(run_dir.metrics, row)
        _save(run_dir, progress, config, improved=row.get("is_best", False))
        callbacks.on_round(row)


def _compute_round(client, setup, progress, t, shards, placement, test, token):  # type: ignore[no-untyped-def]
    """Submit round t as one graph and wait for it, retrying if workers were lost."""
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    for attempt in range(1, MAX_ROUND_ATTEMPTS + 1):
        # Wrapped in lists: scatter would spread a dict's items (the state) over keys.
        weights, state = client.scatter([progress.weights, progress.state], hash=False)
        plan = RoundPlan(
            strategy=setup.strategy,
            spec=setup.spec,
            seed=setup.config.seed,
            round_index=t,
            token=f"{token}a{attempt}",
            weights=weights,
            state=state,
            shards=shards,
            placement=placement,
            test_shard=test,
        )
        graph, keys = build_round(plan)
        wanted = [keys.result] + ([keys.evaluation] if keys.evaluation else [])
        futures = client.get(graph, wanted, sync=False)
        try:
            values = client.gather(futures)
        except (KilledWorker, FutureCancelledError, CommClosedError, OSError):
            if attempt == MAX_ROUND_ATTEMPTS:
                raise
            continue
        finally:
            del futures, weights, state  # release the round: nothing of it stays on the cluster
        return values[0], (values[1] if len(values) > 1 else None), attempt
    raise AssertionError("unreachable")


def _metrics_row(setup, progress, t, result, evaluation, wall_s) -> dict[str, Any]:  # type: ignore[no-untyped-def]
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
        "comm_rounds": progress.cum_comm_rounds + len(setup.strategy.phases),
        # Beyond the required fields: straggler view and cluster size of this round.
        "median_worker_compute_s": compute[len(compute) // 2],
        "num_workers": len(compute),
    }
    accuracy = row["test_accuracy"]
    row["is_best"] = accuracy is not None and accuracy > progress.best_accuracy
    assert set(FIELDS) <= set(row)
    return row


def _check_finite(result, row, run_dir) -> None:  # type: ignore[no-untyped-def]
    loss = row["train_loss"]
    if not bool(torch.isfinite(result.weights).all()) or (
        loss is not None and not math.isfinite(loss)
    ):
        raise TrainingDiverged(
            f"round {row['round']}: loss or weights are not finite (train_loss={loss}); the last "
            f"good checkpoint is kept in {run_dir.latest}; try a larger --mu or a smaller "
            "--local-lr"
        )


def _advance(progress: Progress, result, row: dict[str, Any], t: int) -> None:  # type: ignore[no-untyped-def]
    progress.round = t
    progress.weights = result.weights
    progress.state = result.state
    progress.cum_comm_bytes = row["cum_comm_bytes"]
    progress.cum_comm_rounds = row["comm_rounds"]
    if row["is_best"]:
        progress.best_accuracy = row["test_accuracy"]


def _save(run_dir: RunDir, progress: Progress, config: RunConfig, *, improved: bool) -> None:
    payload = {
        "round": progress.round,
        "weights": progress.weights,
        "state": progress.state,
        "best_accuracy": progress.best_accuracy,
        "cum_comm_bytes": progress.cum_comm_bytes,
        "cum_comm_rounds": progress.cum_comm_rounds,
        "config": config.as_dict(),
    }
    save_checkpoint(run_dir.latest, payload)
    if improved:
        save_checkpoint(run_dir.best, payload)


def _summary(setup: RunSetup, run_dir: RunDir, progress: Progress) -> dict[str, Any]:
    from dask_dane.pipeline.metrics import read_metrics

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
