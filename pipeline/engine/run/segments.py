"""The driver of `--collective torch`: segments of rounds, each one task per worker.

Per segment the driver takes a lease on each of the run's workers (xgboost.dask takes a
MultiLock: two runs sharing workers never interleave their groups, whose all-gathers would
wait on each other's tasks), scatters the state it starts from, and submits one task
per worker (segment.run_segment), pinned with `workers=[addr]` and `allow_other_workers`: a
task pinned alone would wait forever for a lost worker (dask/distributed#8320), and one run
elsewhere refuses to join (LandedElsewhere). It then records each round as its messages
arrive on the segment's Dask Queue: the same rows, checkpoints, events and callbacks as the
Dask graph's driver (pipelined.py, whose recording this reuses).

A failed segment (a peer killed, frozen past --collective-timeout, or its task moved) is
settled (every task ended), and the run goes on from the last recorded round: its weights
from a surviving worker's copy (segment.kept_result) where the driver did not take them,
the shards where Dask reloaded them; the same weights and seeds, so the same results. After
MAX_ROUND_ATTEMPTS failures without a recorded round, the run stops (ClusterLost).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

from distributed import Future, Queue

from ...launchers.errors import ClusterLost
from ..round import comm
from ..round.aggregate import owned_nodes
from ..round.group import GroupFailed, GroupSpec
from . import fetch, run_state
from .bounded import bounded, check_scheduler
from .fetch import Taken
from .pipelined import MAX_ROUND_ATTEMPTS, WORKER_LOST, _Driver, _ends, _record
from .segment import LandedElsewhere, kept_result, run_segment
from .segment_cluster import lock_workers, release, remove_workers, settle
from .segment_plan import RoundMessage, SegmentPlan, Selection

# What ends a segment early, to be run again from the last recorded round.
SEGMENT_LOST = (*WORKER_LOST, GroupFailed, LandedElsewhere)
# How often the driver, waiting for a row, looks at the segment's tasks; the longest pause
# between two reads of the rows' Queue.
POLL_S = 0.5
POLL_MAX_S = 0.02
# Seconds between checks that the scheduler answers, while no row arrives.
SCHEDULER_CHECK_S = 5.0


class SegmentFailed(Exception):
    """A segment lost a worker (SEGMENT_LOST, the `cause`), with the workers found frozen."""

    def __init__(self, cause: BaseException, frozen: set[str]):
        super().__init__(str(cause))
        self.cause, self.frozen = cause, frozen


@dataclass
class _Segment:
    """A segment on the cluster: its plan, its tasks, and the rounds' parts received."""

    plan: SegmentPlan
    futures: list[Future]
    parts: dict[int, list[RoundMessage]] = field(default_factory=dict)
    checked: float = field(default_factory=time.monotonic)  # the scheduler last answered
    pending: list[RoundMessage] = field(default_factory=list)  # read, not yet recorded


def run_segments(driver: _Driver) -> None:
    """Rounds state.round + 1 .. config.rounds, segment after segment (pipelined.run_chained
    runs this in place of its per-round graphs)."""
    state, config = driver.state, driver.setup.config
    attempts = 1  # without a recorded round: each failure leaves it to the next attempt
    while state.round < config.rounds:
        recorded = state.round
        try:
            if _run_segment(driver, attempts):
                return
        except SegmentFailed as failed:
            err = failed.cause
            if state.round > recorded:
                attempts = 1
            attempts += 1
            check_scheduler(driver.client, config.timeout)  # the scheduler itself gone: stop
            if attempts > MAX_ROUND_ATTEMPTS:
                raise ClusterLost(
                    f"round {state.round + 1} failed {MAX_ROUND_ATTEMPTS} times as workers "
                    f"were lost ({type(err).__name__}: {err})"
                ) from None
            _restart(driver, failed.frozen)
            continue
        attempts = 1


def _run_segment(driver: _Driver, attempts: int) -> bool:
    """One segment, under the workers' locks; whether the run stopped early in it."""
    workers = list(dict.fromkeys(driver.data.placement))
    locks = lock_workers(driver.client, workers)
    gone = False  # the scheduler stopped answering
    try:
        segment = _submit(driver, workers)
        try:
            stopped = _follow(driver, segment, attempts)
        except SEGMENT_LOST as err:
            frozen = _settle(driver, segment, wait=True)
            raise SegmentFailed(err, frozen) from err
        except ClusterLost:  # the scheduler stopped answering: nothing to ask it
            gone = True
            raise
        except BaseException:  # the run itself failed, or Ctrl-C: nothing to wait for
            _settle(driver, segment, wait=False)
            raise
        _settle(driver, segment, wait=True)  # the tasks end as their last row arrives
        return stopped
    finally:
        release(locks, 0.0 if gone else driver.timeout)


def _submit(driver: _Driver, workers: list[str]) -> _Segment:
    """The segment's tasks, one a worker, starting from the driver's state."""
    client, setup, state, data = driver.client, driver.setup, driver.state, driver.data
    config, started = setup.config, time.perf_counter()
    driver.attempt += 1
    name = f"{data.token}a{driver.attempt}"
    sent = fetch.scatter_carry(driver)
    driver.scatter_s += time.perf_counter() - started
    plan = SegmentPlan(
        group=GroupSpec(name=name, world=len(workers), timeout_s=config.collective_timeout),
        first=state.round + 1,
        rounds=config.rounds,
        eval_every=config.eval_every,
        checkpoint_every=config.checkpoint_every,
        queue=f"dane-rows-{name}",
        selection=Selection(
            best_score=state.best_score,
            since_best=state.since_best,
            patience=config.patience,
            stop_at_accuracy=config.stop_at_accuracy,
        ),
        has_states=setup.strategy.shard_state_type is not None,
    )
    # Each rank sums its shards' outputs where they are (on a GPU: through NCCL).
    static = replace(
        run_state.round_input_of(setup, plan.first, data.placement), sums_on_device=True
    )
    futures = []
    for rank, worker in enumerate(workers):
        mine = [i for i, at in enumerate(data.placement) if at == worker]
        args = (
            [data.shards[i] for i in mine],
            owned_nodes(data.placement, worker),
            (mine, [data.test[i] for i in mine]),
            sent,
        )
        key = f"segment-{plan.first}-{rank}-{name}"
        futures.append(
            client.submit(
                run_segment, plan, static, rank, worker, *args,
                key=key, workers=[worker], allow_other_workers=True, pure=False,
            )
        )  # fmt: skip
    return _Segment(plan=plan, futures=futures)


def _follow(driver: _Driver, segment: _Segment, attempts: int) -> bool:
    """Record the segment's rounds as their parts arrive; whether the run stops in it."""
    plan, client = segment.plan, driver.client
    rows = Queue(plan.queue, client=client)
    expected = plan.group.world if plan.has_states else 1
    last_row_at = waited_since = time.perf_counter()
    while True:
        message = _next_message(driver, segment, rows)
        parts = segment.parts.setdefault(message.round, [])
        parts.append(message)
        if len(parts) < expected:
            continue
        head = next(part for part in parts if part.rank == 0)
        now = time.perf_counter()
        taken = _taken(head, parts, {"wait_s": now - waited_since, "gather_s": 0.0})
        run_state.check_finite(
            taken.result, head.round, driver.run_dir, driver.state.saved_round, taken.finite
        )
        row = _record(driver, taken, attempts, now - last_row_at)
        timings = {"scatter_s": driver.scatter_s, "submit_s": 0.0, **taken.waited}
        driver.callbacks.on_timings(head.round, timings)
        driver.scatter_s, driver.scatter_bytes, driver.reloaded = 0.0, 0, 0
        last_row_at = waited_since = time.perf_counter()
        driver.callbacks.on_round(row)
        if _ends(driver, row, take=_take_kept):
            return True
        if head.ends:
            return False


def _next_message(driver: _Driver, segment: _Segment, rows: Queue) -> RoundMessage:
    """The next part from the segment's Queue. The Queue is read without waiting on the
    scheduler (a get that times out there logs an error each time), at a pace that backs
    off from 1 ms to POLL_MAX_S while nothing comes; every POLL_S without a part the tasks
    are checked (_check), and every SCHEDULER_CHECK_S the scheduler (ClusterLost if it
    stopped answering; each read is bounded by --timeout, since a frozen one never does)."""
    pause, since = 1e-3, time.monotonic()
    while not segment.pending:
        try:
            got = bounded(driver.client, driver.timeout, rows.get, None, True)
        except OSError:  # unanswered within --timeout: ClusterLost if the scheduler went
            check_scheduler(driver.client, driver.timeout)
            raise
        segment.pending.extend(got)
        if got:
            break
        now = time.monotonic()
        if now - since > POLL_S:
            if now - segment.checked > SCHEDULER_CHECK_S:
                check_scheduler(driver.client, driver.timeout)
                segment.checked = now
            _check(segment)
            since = now
        time.sleep(pause)
        pause = min(2 * pause, POLL_MAX_S)
    return segment.pending.pop(0)


def _taken(head: RoundMessage, parts: list[RoundMessage], waited: dict[str, float]) -> Taken:
    """A round's parts as the Dask driver takes a round (fetch.take_round)."""
    result = head.result
    assert result is not None, "rank 0's part holds the round's figures"
    merged: dict[int, Any] = {}
    for part in parts:
        merged.update(part.shard_states or {})
    if merged:
        result = replace(result, shard_states=[merged[i] for i in sorted(merged)])
    fetched = comm.payload_bytes([part.result for part in parts if part.result is not None])
    fetched += comm.payload_bytes(merged)
    return Taken(result, head.evaluation, fetched, waited, head.finite, head.weights)


def _check(segment: _Segment) -> None:
    """Raise where one of the segment's tasks failed: a failure of the run itself (a bad
    shard, a model error) as it is, else the first loss (SEGMENT_LOST)."""
    errors = [f.exception() for f in segment.futures if f.status == "error"]
    real = [err for err in errors if not isinstance(err, SEGMENT_LOST)]
    if real or errors:
        raise (real or errors)[0]
    if any(f.status == "cancelled" for f in segment.futures):
        raise OSError("a segment's task was cancelled as its worker was lost")
    if all(f.status == "finished" for f in segment.futures):
        raise OSError("the segment ended before its last round reached the driver")


def _settle(driver: _Driver, segment: _Segment, *, wait: bool) -> set[str]:
    """segment_cluster.settle for this segment: the workers found frozen."""
    workers = list(dict.fromkeys(driver.data.placement))
    return settle(
        driver.client, segment.futures, workers,
        plan=segment.plan, timeout=driver.timeout, wait=wait,
    )  # fmt: skip


def _take_kept(driver: _Driver) -> None:
    """The last recorded round's weights from a worker that kept them (segment.kept_result),
    into the state: where the driver did not take them with the round."""
    state, client = driver.state, driver.client
    chain = f"{driver.data.token}a{driver.attempt}"
    found = client.run(kept_result, chain, state.round, on_error="ignore")
    kept = [value for value in found.values() if value is not None]
    if not kept:
        raise ClusterLost(
            f"round {state.round}'s weights were lost with their workers before being fetched"
        )
    result, _ = kept[0]
    state.weights, state.buffers, state.state = result.weights, result.buffers, result.state
    state.weights_round = state.round


def _restart(driver: _Driver, frozen: set[str]) -> None:
    """After a failed segment: the last recorded round's weights where they were left on the
    workers, the `frozen` workers removed from the cluster (their shards reload on the
    others), and where the shards live now (Dask reloaded a lost worker's)."""
    state, data = driver.state, driver.data
    if frozen:
        print(
            f"dane: removing {len(frozen)} worker(s) that stopped answering "
            f"({', '.join(sorted(frozen))}); their shards reload on the others",
            file=sys.stderr,
        )
        driver.client.run_on_scheduler(remove_workers, sorted(frozen))
    if state.weights_round < state.round:
        _take_kept(driver)
    placement = fetch.current_placement(driver.client, data, driver.timeout)
    driver.reloaded += sum(a != b for a, b in zip(data.placement, placement, strict=True))
    driver.data = replace(data, placement=placement)
