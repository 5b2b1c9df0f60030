"""The rounds of `--collective torch` (driver.py's round source): segments of rounds, each one
task per worker.

Per segment the driver takes a lease on each of the run's workers (xgboost.dask takes a
MultiLock: two runs sharing workers never interleave their groups, whose all-gathers would
wait on each other's tasks), scatters the state it starts from, and submits one task
per worker (segment.run_segment), pinned with `workers=[addr]` and `allow_other_workers`: a
task pinned alone would wait forever for a lost worker (dask/distributed#8320), and one run
elsewhere refuses to join (LandedElsewhere). It then records each round as its messages
arrive on the segment's Dask Queue; the driver records them as it records the Dask graph's.

A failed segment (a peer killed, frozen past --collective-timeout, or its task moved) is
settled (every task ended), and the run goes on from the last recorded round: its weights
from a surviving worker's copy (segment.kept_result) where the driver did not take them,
the shards where Dask reloaded them; the same weights and seeds, so the same results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from distributed import Future, Queue, Semaphore

from ..round import comm
from ..round.aggregate import owned_nodes
from ..round.group import GroupFailed, GroupSpec
from . import fetch, run_state
from .bounded import bounded, check_scheduler
from .decisions import Selection
from .driver import Driver
from .errors import ClusterLost
from .fetch import Taken
from .pipelined import WORKER_LOST
from .segment import LandedElsewhere, kept_result, run_segment
from .segment_cluster import lock_workers, release, remove_workers, settle
from .segment_plan import RoundMessage, SegmentPlan

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
    """A segment on the cluster: its plan, its tasks, the leases it holds, the rounds' parts
    received, and whether its last round was received."""

    plan: SegmentPlan
    futures: list[Future]
    locks: list[Semaphore]
    rows: Queue
    parts: dict[int, list[RoundMessage]] = field(default_factory=dict)
    checked: float = field(default_factory=time.monotonic)  # the scheduler last answered
    pending: list[RoundMessage] = field(default_factory=list)  # read, not yet recorded
    ended: bool = False


@dataclass
class SegmentRounds:
    """Segment after segment, each under a lease on its workers, until the run's last round."""

    lost = (SegmentFailed,)
    segment: _Segment | None = None

    def next(self, driver: Driver) -> Taken:
        """The next round's parts, merged; a segment ended (its last round received) is
        settled and the next one submitted first."""
        if self.segment is not None and self.segment.ended:
            self._end(driver, wait=True)  # its tasks end as their last row arrives
        if self.segment is None:
            self.segment = _submit(driver)
        try:
            return _next_round(driver, self.segment)
        except SEGMENT_LOST as err:
            frozen = self._end(driver, wait=True)
            raise SegmentFailed(err, frozen) from err

    def restart(self, driver: Driver, err: BaseException) -> None:
        """After a failed segment: the last recorded round's weights where they were left on
        the workers, the frozen workers removed from the cluster (their shards reload on the
        others), and where the shards live now."""
        frozen = getattr(err, "frozen", set())
        if frozen:
            driver.callbacks.on_note(
                f"dane: removing {len(frozen)} worker(s) that stopped answering "
                f"({', '.join(sorted(frozen))}); their shards reload on the others"
            )
            driver.client.run_on_scheduler(remove_workers, sorted(frozen))
        if driver.state.weights_round < driver.state.round:
            self.take_weights(driver)
        driver.follow_shards()

    def take_weights(self, driver: Driver) -> None:
        """The last recorded round's weights from a worker that kept them
        (segment.kept_result), where the driver did not take them with the round."""
        chain = f"{driver.data.token}a{driver.attempt}"
        found = driver.client.run(kept_result, chain, driver.state.round, on_error="ignore")
        kept = [value for value in found.values() if value is not None]
        if not kept:
            raise ClusterLost(
                f"round {driver.state.round}'s weights were lost with their workers before "
                "being fetched"
            )
        driver.adopt(kept[0][0])

    def close(self, driver: Driver, error: BaseException | None) -> None:
        """The segment's tasks settled and its leases given back: waited for after its last
        round, cancelled where the run itself failed (or Ctrl-C), and nothing asked of a
        scheduler that stopped answering."""
        if self.segment is None:
            return
        if isinstance(error, ClusterLost):
            release(self.segment.locks, 0.0)
            self.segment = None
        else:
            self._end(driver, wait=error is None)

    def _end(self, driver: Driver, *, wait: bool) -> set[str]:
        """The segment settled (segment_cluster.settle), its leases given back; the workers
        found frozen."""
        segment, self.segment = self.segment, None
        assert segment is not None
        workers = list(dict.fromkeys(driver.data.placement))
        try:
            return settle(
                driver.client, segment.futures, workers,
                plan=segment.plan, timeout=driver.timeout, wait=wait,
            )  # fmt: skip
        finally:
            release(segment.locks, driver.timeout)


def _submit(driver: Driver) -> _Segment:
    """The segment's tasks, one a worker, starting from the driver's state, under a lease on
    each of its workers."""
    client, setup, state, data = driver.client, driver.setup, driver.state, driver.data
    workers = list(dict.fromkeys(data.placement))
    locks = lock_workers(client, workers, driver.callbacks.on_note)
    config, started = setup.config, time.perf_counter()
    driver.attempt += 1
    name = f"{data.token}a{driver.attempt}"
    try:
        sent = fetch.scatter_carry(driver)
    except BaseException:
        release(locks, driver.timeout)
        raise
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
    rows = Queue(plan.queue, client=client)
    return _Segment(plan=plan, futures=futures, locks=locks, rows=rows)


def _next_round(driver: Driver, segment: _Segment) -> Taken:
    """The segment's next round, once every part of it arrived, as the Dask graph's rounds
    are taken (fetch.take_round)."""
    expected = segment.plan.group.world if segment.plan.has_states else 1
    waited_since = time.perf_counter()
    while True:
        message = _next_message(driver, segment)
        parts = segment.parts.setdefault(message.round, [])
        parts.append(message)
        if len(parts) == expected:
            break
    head = next(part for part in parts if part.rank == 0)
    del segment.parts[head.round]
    segment.ended = head.ends
    assert head.result is not None, "rank 0's part holds the round's figures"
    result = fetch.with_shard_states(head.result, [part.shard_states for part in parts])
    fetched = comm.payload_bytes([part.result for part in parts])
    if result is not head.result:  # the shards' states merged in, fetched with the parts
        fetched += comm.payload_bytes(result.shard_states)
    waited = {"submit_s": 0.0, "wait_s": time.perf_counter() - waited_since, "gather_s": 0.0}
    return Taken(result, head.evaluation, fetched, waited, head.finite, head.weights)


def _next_message(driver: Driver, segment: _Segment) -> RoundMessage:
    """The next part from the segment's Queue. The Queue is read without waiting on the
    scheduler (a get that times out there logs an error each time), at a pace that backs
    off from 1 ms to POLL_MAX_S while nothing comes; every POLL_S without a part the tasks
    are checked (_check), and every SCHEDULER_CHECK_S the scheduler (ClusterLost if it
    stopped answering; each read is bounded by --timeout, since a frozen one never does)."""
    pause, since = 1e-3, time.monotonic()
    while not segment.pending:
        try:
            got = bounded(driver.client, driver.timeout, segment.rows.get, None, True)
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
