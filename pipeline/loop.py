"""The driver: for each round, build its graph, compute it, record metrics, checkpoint.

Per round the client sends the current weights (and strategy state) once, receives the new
weights and the round's metrics, and releases the round's futures. Shards are loaded once per
run by tasks pinned to their workers and stay there; only weights, gradients and metrics move.
"""

from __future__ import annotations

import math
import shutil
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from distributed import Client, span

from dask_dane.pipeline import tasks
from dask_dane.pipeline.aggregate import shard_placement
from dask_dane.pipeline.algorithms.base import for_round
from dask_dane.pipeline.checkpoint import (
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)
from dask_dane.pipeline.cluster import make_client, worker_addresses
from dask_dane.pipeline.config import RunConfig
from dask_dane.pipeline.errors import ClusterLost, TrainingDiverged
from dask_dane.pipeline.graph import RoundPlan, build_round
from dask_dane.pipeline.metrics import FIELDS, append_metrics, keep_rounds_up_to
from dask_dane.pipeline.rundir import RunDir
from dask_dane.pipeline.setup import RunSetup, initial_weights, prepare_run

# A round whose tasks fail because a worker died is run again from the same weights and
# seeds (so the result is unchanged); after this many failures in one round the run stops.
MAX_ROUND_ATTEMPTS = 3


__all__ = ["Callbacks", "ClusterLost", "Progress", "TrainingDiverged", "train"]


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


@dataclass
class Callbacks:
    on_start: Callable[[str, int], None] = lambda dashboard, workers: None
    on_round: Callable[[dict[str, Any]], None] = lambda row: None
    # After each round: (round, new weights); benchmarks use it to score every iterate.
    on_weights: Callable[[int, torch.Tensor], None] = lambda round_index, weights: None


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
    # The topmost folder that starting the run creates (if any), to remove if no round is done.
    folders = [*reversed(run_dir.root.parents), run_dir.root]
    created = next((folder for folder in folders if not folder.exists()), None)
    progress = _start(setup, run_dir, resume=resume)
    try:
        if progress.round < config.rounds:
            # One span for the whole run: without it the cluster, idle between rounds, opens
            # a new default span every round, and workers keep per-span metrics for good (a
            # slow leak, measured by `dane bench soak`).
            with (
                nullcontext(client) if client else make_client(config) as active,
                span("dane-train"),
            ):
                workers = worker_addresses(active)
                loaded = _load_shards(active, setup, workers)  # a damaged shard raises here
                callbacks.on_start(active.dashboard_link, len(workers))
                _run_rounds(active, setup, run_dir, progress, loaded, callbacks)
    except BaseException:
        if created is not None and progress.round == 0:  # no scheduler answered, say
            shutil.rmtree(created, ignore_errors=True)
        raise
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


@dataclass
class _Loaded:
    """The run's shard futures (held for the whole run) and where each shard lives now."""

    token: str
    shards: list[Any]
    test: Any
    placement: list[str]
    test_worker: str


def _load_shards(client: Client, setup: RunSetup, workers: list[str]) -> _Loaded:
    """One pinned load task per shard (aggregate.shard_placement); the test split on worker 0.

    The futures are held for the whole run, so each shard stays in its worker's memory. If a
    worker dies, Dask reruns the load task elsewhere: zarr on disk is the source of truth.
    Waits for the loads: a shard that fails its checks (datasets/store.py read_shard) raises
    its ValueError here, before the first round.
    """
    token = uuid.uuid4().hex[:8]
    placement = shard_placement(setup.store.num_shards, workers)
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
    _wait(client, [*shards, test], setup.config)
    for future in [*shards, test]:
        if future.status == "error":
            raise future.exception()
    return _Loaded(
        token=token, shards=shards, test=test, placement=placement, test_worker=workers[0]
    )


def _wait(client: Client, futures: list[Any], config: RunConfig) -> None:
    """Wait for futures, however long they take, while the scheduler answers.

    Every few seconds the scheduler is asked for its identity; if the client has lost it, or
    it does not answer within --timeout, ClusterLost (a round may take any time; a silent
    scheduler may not). Done-callbacks wake the driver the moment the last future finishes
    (polling would add its interval to every round); `distributed.wait(timeout=...)` is
    avoided because each timeout leaves a reference cycle that holds the round's futures
    until the garbage collector runs, so finished rounds would linger on the scheduler.
    """
    pending = [future for future in futures if not future.done()]
    if not pending:
        return
    all_done = threading.Event()
    remaining = [len(pending)]
    lock = threading.Lock()

    def one_done(_future: Any) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                all_done.set()

    for future in pending:
        future.add_done_callback(one_done)
    poll = min(5.0, config.timeout)
    while not all_done.wait(poll):
        _check_scheduler(client, config)


def _check_scheduler(client: Client, config: RunConfig) -> None:
    """ClusterLost unless the scheduler answers within --timeout."""
    reason = None
    if client.status != "running":
        reason = f"the client lost the scheduler (client status {client.status})"
    else:
        try:
            client.sync(client.scheduler.identity, callback_timeout=config.timeout)
        except (OSError, TimeoutError) as err:
            reason = (
                f"the scheduler did not answer within {config.timeout:g} s ({type(err).__name__})"
            )
    if reason:
        raise ClusterLost(reason)


def _bounded(client: Client, config: RunConfig, method: Callable, *args: Any, **kwargs: Any) -> Any:
    """client.method(*args, **kwargs), given at most --timeout seconds to answer.

    A frozen scheduler (stopped, or its event loop blocked) keeps its sockets open, so no
    connection ever fails and a plain scatter or gather waits for it forever. The
    TimeoutError is an OSError: callers check the scheduler and raise ClusterLost.
    """

    async def run() -> Any:
        return await method(*args, asynchronous=True, **kwargs)

    return client.sync(run, callback_timeout=config.timeout)


def _current_placement(client: Client, loaded: _Loaded, config: RunConfig) -> list[str]:
    """The worker that holds each shard now (Dask reloads a lost worker's shards elsewhere).

    A shard stays with its previous worker while that worker still holds it; otherwise it is
    placed on a worker that does, so that local tasks never fetch a shard over the network.
    """
    try:
        _wait(client, loaded.shards, config)  # shards being reloaded after a worker died
        keys = [future.key for future in loaded.shards]
        holders = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=config.timeout)
    except OSError:
        _check_scheduler(client, config)  # ClusterLost if it is the scheduler that went
        raise
    placement = []
    for future, previous in zip(loaded.shards, loaded.placement, strict=True):
        where = sorted(holders.get(future.key, ()))
        placement.append(previous if previous in where or not where else where[0])
    return placement


def _run_rounds(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    progress: Progress,
    loaded: _Loaded,
    callbacks: Callbacks,
) -> None:
    config = setup.config
    test = loaded.test
    for t in range(progress.round + 1, config.rounds + 1):
        evaluate = t % config.eval_every == 0 or t == config.rounds
        started = time.perf_counter()
        placement = loaded.placement
        try:
            result, evaluation, attempts, laps = _compute_round(
                client, setup, progress, t, loaded, test if evaluate else None
            )
            loaded.placement = _current_placement(client, loaded, config)
        except ClusterLost as err:
            raise ClusterLost(_lost_message(config, run_dir, t, str(err))) from None
        row = _metrics_row(setup, progress, t, result, evaluation, time.perf_counter() - started)
        row["attempts"] = attempts
        row.update(laps)  # where the driver's time went: scatter, submit, wait, gather
        # Shards whose worker was lost in this round and that Dask reloaded from zarr.
        row["shards_reloaded"] = sum(
            a != b for a, b in zip(placement, loaded.placement, strict=True)
        )
        _check_finite(result, row, run_dir)
        _advance(progress, result, row, t)
        append_metrics(run_dir.metrics, row)
        _save(run_dir, progress, config, improved=row.get("is_best", False))
        callbacks.on_round(row)
        callbacks.on_weights(t, progress.weights)


def _lost_message(config: RunConfig, run_dir: RunDir, t: int, reason: str) -> str:
    cluster = f"the Dask cluster at {config.scheduler}" if config.scheduler else "the Dask cluster"
    if t == 1:
        return f"lost {cluster} in round 1: {reason}; no round finished; run the command again"
    return (
        f"lost {cluster} in round {t}: {reason}; rounds 1-{t - 1} are saved in {run_dir.root}; "
        f"start a cluster and continue with `dane train --out {run_dir.root} --resume`"
    )


def _compute_round(client, setup, progress, t, loaded, test):  # type: ignore[no-untyped-def]
    """Submit round t as one graph and wait for it, retrying if workers were lost.

    A retry reruns the round from the same weights with the same seeds, so its result is the
    one the first attempt would have given. Also returns where the driver's time went
    (scatter, building and submitting the graph, waiting, gathering) for the metrics.
    """
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    for attempt in range(1, MAX_ROUND_ATTEMPTS + 1):
        futures = weights = state = shard_states = None
        clock = _Clock()
        try:
            if attempt > 1:  # a worker was lost: where do its shards live now?
                loaded.placement = _current_placement(client, loaded, setup.config)
            placement = loaded.placement
            # After a lost worker the placement may still name it: scatter anywhere then.
            targets = placement if attempt == 1 else None
            weights, state, shard_states = _scatter_inputs(client, progress, targets, setup.config)
            clock.lap("scatter_s")
            futures = _submit_round(
                client,
                setup,
                progress,
                t,
                loaded.shards,
                placement,
                test,
                f"{loaded.token}a{attempt}",
                weights,
                state,
                shard_states,
                loaded.test_worker,
            )
            clock.lap("submit_s")
            _wait(client, futures, setup.config)
            clock.lap("wait_s")
            values = _bounded(client, setup.config, client.gather, futures)
            clock.lap("gather_s")
        except (KilledWorker, FutureCancelledError, CommClosedError, OSError) as err:
            _check_scheduler(client, setup.config)  # the scheduler itself gone: stop now
            if attempt == MAX_ROUND_ATTEMPTS:
                raise ClusterLost(
                    f"round {t} failed {attempt} times as workers were lost "
                    f"({type(err).__name__}: {err})"
                ) from None
            continue
        finally:
            # Release the round: nothing of it stays on the cluster.
            del futures, weights, state, shard_states
        return values[0], (values[1] if len(values) > 1 else None), attempt, clock.laps
    raise AssertionError("unreachable")


class _Clock:
    """Named laps of the driver's time in a round (seconds), for the metrics row."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


def _scatter_inputs(
    client: Client, progress: Progress, placement: list[str] | None, config: RunConfig
) -> Any:
    """The round's inputs onto the workers that need them first.

    Weights and strategy state go to the worker where the reduction tree ends (graph.py);
    each shard's own state (algorithms/base.py) to the worker holding the shard. Scattering
    to a worker that has just died raises KeyError on the scheduler: reported as the lost
    worker it is (OSError), so the round is retried, scattering anywhere (placement None).
    """

    def to(index: int) -> list[str] | None:
        return [placement[index]] if placement else None

    def scatter(data: list[Any], workers: list[str] | None) -> list[Any]:
        return _bounded(client, config, client.scatter, data, hash=False, workers=workers)

    try:
        # Wrapped in lists: scatter would spread a dict's items over keys.
        weights, state = scatter([progress.weights, progress.state], to(0))
        shard_states = None
        if progress.shard_states is not None:
            shard_states = [scatter([s], to(i))[0] for i, s in enumerate(progress.shard_states)]
    except KeyError as err:
        raise OSError(f"a worker left while the round's inputs were sent ({err})") from None
    return weights, state, shard_states


def _submit_round(  # type: ignore[no-untyped-def]
    client,
    setup,
    progress,
    t,
    shards,
    placement,
    test,
    token,
    weights,
    state,
    shard_states,
    test_worker,
):
    """Build round t's graph on the scattered inputs and submit it; returns the futures."""
    plan = RoundPlan(
        strategy=for_round(setup.strategy, progress.state),
        spec=setup.spec,
        seed=setup.config.seed,
        round_index=t,
        token=token,
        weights=weights,
        state=state,
        shards=shards,
        placement=placement,
        test_shard=test,
        test_worker=test_worker,
        shard_states=shard_states,
    )
    graph, keys = build_round(plan)
    wanted = [keys.result] + ([keys.evaluation] if keys.evaluation else [])
    return client.get(graph, wanted, sync=False)


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


def _check_finite(result, row, run_dir) -> None:  # type: ignore[no-untyped-def]
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


def _advance(progress: Progress, result, row: dict[str, Any], t: int) -> None:  # type: ignore[no-untyped-def]
    progress.round = t
    progress.weights = result.weights
    progress.state = result.state
    if result.shard_states is not None:
        progress.shard_states = result.shard_states
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
        "shard_states": progress.shard_states,
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
