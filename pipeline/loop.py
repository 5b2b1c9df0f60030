"""The driver: for each round, build its graph, compute it, record metrics, checkpoint.

Per round the client sends the current weights (and strategy state) once, receives the new
weights and the round's metrics, and releases the round's futures. Shards are loaded once per
run by tasks pinned to their workers and stay there; only weights, gradients and metrics move.

What the driver keeps between rounds (checkpoints, metrics rows, the summary) is in
progress.py; its requests to the cluster, each bounded so that none waits forever, are in
cluster.py.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from distributed import Client, span

from . import tasks
from .aggregate import shard_placement
from .algorithms.base import for_round
from .cluster import (
    bounded,
    check_scheduler,
    make_client,
    wait_for,
    worker_addresses,
)
from .config import RunConfig
from .errors import ClusterLost, TrainingDiverged
from .graph import RoundPlan, build_round
from .metrics import append_metrics
from .progress import (
    Progress,
    advance,
    check_finite,
    metrics_row,
    save_progress,
    start_progress,
    summary,
)
from .rundir import RunDir
from .setup import RunSetup, prepare_run

# A round whose tasks fail because a worker died is run again from the same weights and
# seeds (so the result is unchanged); after this many failures in one round the run stops.
MAX_ROUND_ATTEMPTS = 3


__all__ = ["Callbacks", "ClusterLost", "Progress", "TrainingDiverged", "train"]


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
    progress = start_progress(setup, run_dir, resume=resume)
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
    result = summary(setup, run_dir, progress)
    run_dir.write_summary(result)
    return result


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
    wait_for(client, [*shards, test], setup.config)
    for future in [*shards, test]:
        if future.status == "error":
            raise future.exception()
    return _Loaded(
        token=token, shards=shards, test=test, placement=placement, test_worker=workers[0]
    )


def _current_placement(client: Client, loaded: _Loaded, config: RunConfig) -> list[str]:
    """The worker that holds each shard now (Dask reloads a lost worker's shards elsewhere).

    A shard stays with its previous worker while that worker still holds it; otherwise it is
    placed on a worker that does, so that local tasks never fetch a shard over the network.
    """
    try:
        wait_for(client, loaded.shards, config)  # shards being reloaded after a worker died
        keys = [future.key for future in loaded.shards]
        holders = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=config.timeout)
    except OSError:
        check_scheduler(client, config)  # ClusterLost if it is the scheduler that went
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
        row = metrics_row(setup, progress, t, result, evaluation, time.perf_counter() - started)
        row["attempts"] = attempts
        row.update(laps)  # where the driver's time went: scatter, submit, wait, gather
        # Shards whose worker was lost in this round and that Dask reloaded from zarr.
        row["shards_reloaded"] = sum(
            a != b for a, b in zip(placement, loaded.placement, strict=True)
        )
        check_finite(result, row, run_dir)
        advance(progress, result, row, t)
        append_metrics(run_dir.metrics, row)
        save_progress(run_dir, progress, config, improved=row.get("is_best", False))
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
            wait_for(client, futures, setup.config)
            clock.lap("wait_s")
            values = bounded(client, setup.config, client.gather, futures)
            clock.lap("gather_s")
        except (KilledWorker, FutureCancelledError, CommClosedError, OSError) as err:
            check_scheduler(client, setup.config)  # the scheduler itself gone: stop now
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
        return bounded(client, config, client.scatter, data, hash=False, workers=workers)

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
