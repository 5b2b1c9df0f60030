"""The driver: for each round, build its graph, compute it, record metrics, checkpoint.

Where the all-gather form pays (topology.chains_rounds: --broadcast allgather, or auto on
few workers or a small model) rounds are chained on the cluster and pipelined
(pipelined.py); what follows is the per-round form (--broadcast direct or tree, or auto on
many workers with a large model). Per round the client sends the current weights (and
strategy state) once, receives the new weights and the round's metrics, and releases the
round's futures. Shards are loaded once per run by tasks pinned to their workers and stay
there; only weights, gradients and metrics move.

Where the run stands between rounds (checkpoints, the summary) is run_state.py; the driver's
requests to the cluster, each bounded so that none waits forever, are in cluster.py.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from distributed import Client, span
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

from ..round import comm, tasks
from ..round.aggregate import shard_placement
from ..round.graph import RoundPlan, ShardSet, build_round
from ..round.topology import round_form
from ..setup.config import RunConfig
from ..setup.run_setup import RunSetup, prepare_run
from . import run_state
from .cluster import (
    bounded,
    check_scheduler,
    make_client,
    publish_round,
    wait_for,
    worker_addresses,
)
from .errors import ClusterLost, TrainingDiverged
from .metrics import Laps, RoundOutcome, append_metrics, round_row, stops_early
from .pipelined import current_placement as _current_placement
from .pipelined import run_chained
from .progress import Callbacks, chain  # Callbacks is defined beside the display; re-exported
from .run_state import RunState
from .rundir import RunDir
from .shard_memory import hold_shards, killed_loading, worker_memory_limit
from .tracking import Trackers, TrackingContext

# A round whose tasks fail because a worker died is run again from the same weights and
# seeds (so the result is unchanged); after this many failures in one round the run stops.
MAX_ROUND_ATTEMPTS = 3
# How a lost worker shows in a round: its tasks killed or cancelled, or a connection lost.
WORKER_LOST = (KilledWorker, FutureCancelledError, CommClosedError, OSError)

__all__ = ["Callbacks", "ClusterLost", "RunState", "TrainingDiverged", "train"]


def train(
    config: RunConfig,
    *,
    resume: bool = False,
    callbacks: Callbacks | None = None,
    client: Client | None = None,
    model: Callable[..., torch.nn.Module] | None = None,
    tracking: TrackingContext | None = None,
) -> dict:
    """Train as configured (or continue a run); returns the summary written to summary.json.

    With `client` given (benchmarks running many trainings) that cluster is used as it is;
    otherwise one is started or connected to as the config says, and closed at the end.
    `model` is a Python callable standing for config.model (dask_dane.train(model=fn)).
    `tracking`: what the trackers (tracking.py) need from the caller: the export, the preset.
    """
    setup = prepare_run(config, model)  # all checks before anything is written
    run_dir = RunDir(Path(config.out))
    trackers = Trackers(config, run_dir, resume=resume, context=tracking or TrackingContext())
    callbacks = chain(callbacks or Callbacks(), trackers.callbacks())
    # The topmost folder that starting the run creates (if any), to remove if no round is done.
    folders = [*reversed(run_dir.root.parents), run_dir.root]
    created = next((folder for folder in folders if not folder.exists()), None)
    state = run_state.start_run(setup, run_dir, resume=resume)
    try:
        if state.round < config.rounds:
            # One span for the run: else the idle cluster opens a new default span each round,
            # and workers keep per-span metrics for good (a leak `dane bench soak` measured).
            with (
                nullcontext(client)
                if client
                else make_client(config, worker_log=run_dir.root / "cluster.log") as active,
                span("dane-train"),
            ):
                workers = worker_addresses(active)
                limits = worker_memory_limit(active.scheduler_info(n_workers=-1))
                setup = hold_shards(setup, run_dir, limits, callbacks.on_shards, len(workers))
                data = _load_shards(active, setup, workers)  # a damaged shard raises here
                callbacks.on_start(active.dashboard_link, len(workers))
                _run_rounds(active, setup, run_dir, state, data, callbacks)
    except BaseException:
        trackers.finish(failed=True)
        if created is not None and state.round == 0:  # no scheduler answered, say
            shutil.rmtree(created, ignore_errors=True)
        raise
    result = run_state.summary(setup, state)
    run_dir.write_summary(result)
    trackers.finish()  # after the summary: the run is complete whatever the trackers do
    return result


def _load_shards(client: Client, setup: RunSetup, workers: list[str]) -> ShardSet:
    """One pinned load task per shard (aggregate.shard_placement), and beside each its scoring
    piece (a slice of the test split and the shard's held-out rows: round/scoring.py).

    The futures are held for the run, so each shard stays on its worker; if a worker dies,
    Dask reruns its loads elsewhere (the store is the source of truth). A shard that fails its
    checks (datasets/store/rows.py) raises its ValueError here, before the first round.
    """
    token = uuid.uuid4().hex[:8]
    placement = shard_placement(setup.store.num_shards, workers)

    def load(key: str, worker: str, args: dict, task: Callable = tasks.load_shard) -> Any:
        return client.submit(task, key=key, workers=[worker], allow_other_workers=True, **args)

    shards = [
        load(f"load_shard-{i}-{token}", w, setup.shard_args(i)) for i, w in enumerate(placement)
    ]
    # Scoring pieces, one per shard on its worker: a slice of the test split and that
    # shard's held-out validation rows (round/scoring.py).
    test = [
        load(f"load_test-{i}-{token}", w, setup.piece_args(i), tasks.load_evaluation)
        for i, w in enumerate(placement)
    ]
    try:
        wait_for(client, [*shards, *test], setup.config.timeout)
    except OSError as err:  # every worker lost at once (stranded.py): not a traceback
        raise ValueError(killed_loading(-1, err)) from None
    for index, future in enumerate([*shards, *test]):  # from num_shards on: the pieces
        if future.status == "error":
            err = future.exception()  # KilledWorker: its nanny restarted it past its memory
            raise ValueError(killed_loading(index, err)) if isinstance(err, KilledWorker) else err
    return ShardSet(token=token, shards=shards, placement=placement, test=test)


def _run_rounds(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    state: RunState,
    data: ShardSet,
    callbacks: Callbacks,
) -> None:
    config = setup.config
    workers = len(set(data.placement))
    if run_state.runs_chained(setup, workers, state.weights):  # rounds chained on the cluster
        try:
            run_chained(client, setup, run_dir, state, data, callbacks,
                        lost=WORKER_LOST, max_attempts=MAX_ROUND_ATTEMPTS)  # fmt: skip
        except ClusterLost as err:
            t = state.round + 1  # the first round not recorded
            raise ClusterLost(run_state.lost_message(config, run_dir, t, str(err))) from None
        return
    for t in range(state.round + 1, config.rounds + 1):
        started = time.perf_counter()
        try:
            outcome = _compute_round(client, setup, state, t, data)
        except ClusterLost as err:
            raise ClusterLost(run_state.lost_message(config, run_dir, t, str(err))) from None
        data, result = replace(data, placement=outcome.placement), outcome.result
        run_state.check_finite(result, t, run_dir)  # before the state takes the round
        row = round_row(
            round_index=t,
            strategy=setup.strategy,
            result=result,
            evaluation=outcome.evaluation,
            wall_s=time.perf_counter() - started,
            totals=state.advance(result, outcome.evaluation),
            driver={**outcome.driver, "round_form": round_form(config.broadcast, data.placement)},
        )
        state.rows.append(row)
        append_metrics(run_dir.metrics, row)
        publish_round(client, config.timeout, run_dir.root.absolute(), data.token, row)
        run_state.save_run(run_dir, state, setup, improved=row["is_best"])
        callbacks.on_round(row)
        callbacks.on_weights(t, state.weights)
        if stops_early(config, row, state.since_best):
            break


def _compute_round(
    client: Client, setup: RunSetup, state: RunState, t: int, data: ShardSet
) -> RoundOutcome:
    """Round t, retrying if workers were lost.

    A retry reruns the round from the same weights with the same seeds, so its result is the
    one the first attempt would have given. After each attempt (but a last failed one) the
    driver asks where the shards live now, once: the retry, or the next round, runs there,
    and the round's row counts the shards that moved.
    """
    before = data.placement
    for attempt in range(1, MAX_ROUND_ATTEMPTS + 1):
        ran = _attempt_round(client, setup, state, t, data, attempt)
        data = replace(data, placement=_current_placement(client, data, setup.config.timeout))
        if ran is not None:
            values, laps = ran
            return RoundOutcome(
                result=values[0],
                evaluation=values[1] if len(values) > 1 else None,
                placement=data.placement,
                attempts=attempt,
                laps=laps,
                shards_reloaded=sum(a != b for a, b in zip(before, data.placement, strict=True)),
            )
    raise AssertionError("unreachable")  # the last failed attempt raises ClusterLost


def _attempt_round(
    client: Client, setup: RunSetup, state: RunState, t: int, data: ShardSet, attempt: int
) -> tuple[list[Any], dict[str, float]] | None:
    """Submit round t as one graph, wait for it and gather its outputs (and the laps of the
    driver's time); None if workers were lost, to try again; ClusterLost if the scheduler
    went or this was the last attempt."""
    timeout = setup.config.timeout
    futures = plan = None
    clock = Laps()
    try:
        plan = _scatter_round(client, setup, state, t, data, attempt)
        clock.lap("scatter_s")
        graph, keys = build_round(plan)
        futures = client.get(graph, [k for k in (keys.result, keys.evaluation) if k], sync=False)
        clock.lap("submit_s")
        wait_for(client, futures, timeout)
        clock.lap("wait_s")
        values = bounded(client, timeout, client.gather, futures)
        clock.lap("gather_s")
    except WORKER_LOST as err:
        check_scheduler(client, timeout)  # the scheduler itself gone: stop now
        if attempt == MAX_ROUND_ATTEMPTS:
            raise ClusterLost(
                f"round {t} failed {attempt} times as workers were lost "
                f"({type(err).__name__}: {err})"
            ) from None
        return None
    finally:
        # Release the round: nothing of it stays on the cluster.
        del futures, plan
    return values, clock.laps


def _scatter_round(
    client: Client, setup: RunSetup, state: RunState, t: int, data: ShardSet, attempt: int
) -> RoundPlan:
    """Round t's inputs onto the workers that need them first, in the plan of its graph.

    Weights, strategy state and the round's opening (run_state.round_start) go to the
    worker where the reduction tree ends (graph.py), which serves them to the others;
    each shard's own state (algorithms/base.py) to the worker holding the shard. Scattering
    to a worker that has just died raises KeyError on the scheduler: reported as the lost
    worker it is (OSError), so the round is retried, scattering anywhere.
    """
    config = setup.config
    round_input, opening = run_state.round_start(setup, state, comm.layout(data.placement))
    # After a lost worker the placement may still name it: scatter anywhere then.
    placement = data.placement if attempt == 1 else None

    def to(index: int) -> list[str] | None:
        return [placement[index]] if placement else None

    def scatter(values: list[Any], workers: list[str] | None) -> list[Any]:
        return bounded(client, config.timeout, client.scatter, values, hash=False, workers=workers)

    try:
        # Wrapped in lists: scatter would spread a dict's items over keys.
        first = [state.weights, state.state] + ([opening] if opening is not None else [])
        weights, driver_state, *opened = scatter(first, to(0))
        shard_states = None
        if state.shard_states is not None:
            shard_states = [scatter([s], to(i))[0] for i, s in enumerate(state.shard_states)]
    except KeyError as err:
        raise OSError(f"a worker left while the round's inputs were sent ({err})") from None
    return RoundPlan(
        round_input=round_input,
        token=f"{data.token}a{attempt}",  # a retry's keys are new
        weights=weights,
        state=driver_state,
        shard_states=shard_states,
        opening=opened[0] if opened else None,
        data=data,
        evaluate=t % config.eval_every == 0 or t == config.rounds,
        broadcast=config.broadcast,
    )
