"""The driver of the rounds: chained on the cluster, the driver off their path.

The driver sends the weights once, when the chain starts; from then on round t + 1's tasks
take round t's result where the collective left it (graph.py), and the driver keeps up to
ROUNDS_IN_FLIGHT rounds submitted ahead of the one it records. It fetches each round's
figures (the row) as the round ends, and its weights (the checkpoint) only every
--checkpoint-every rounds, at the end and for a new best.pt (fetch.py), while the cluster
is already computing the next ones. `who_has` is asked only after a worker is lost.

What needs a round's outcome on the driver acts one round late, at most ROUNDS_IN_FLIGHT - 1
rounds of work thrown away, never a round recorded twice or out of order:
- divergence (run_state.check_finite) and `--stop-at-accuracy` read the round's row: the
  rounds already in flight behind it are dropped unrecorded;
- the safeguard, the line search, the skew fixes and the server step run inside the update
  task, on every worker, so they pipeline as the rest of the round does.
A lost worker drops the rounds in flight and restarts the chain from the last recorded
round's state, its weights from a surviving copy of its update where the driver left them
there (_take_held): the same weights and seeds, so the same results.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from distributed import Client, Future
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

from ...launchers.errors import ClusterLost
from ...setup.run_setup import RunSetup
from ..round.graph import ChainLink, RoundKeys, ShardSet, build_round
from ..round.transport import round_form
from . import fetch, run_state
from .bounded import check_scheduler, publish_round
from .checkpoint import CheckpointWriter
from .errors import lost_message
from .fetch import Taken
from .metrics import append_metrics, round_row, stops_early
from .run_state import RunState
from .rundir import RunDir

# Rounds submitted ahead of the one recorded: 2 hides the driver's work of one round.
ROUNDS_IN_FLIGHT = 2
# A round whose tasks fail because a worker died is run again from the same weights and
# seeds (so the result is unchanged); after this many failures in one round the run stops.
MAX_ROUND_ATTEMPTS = 3
# How a lost worker shows in a round: its tasks killed or cancelled, or a connection lost.
WORKER_LOST = (KilledWorker, FutureCancelledError, CommClosedError, OSError)


@dataclass
class _Submitted:
    """A round on the cluster: its output keys and the futures that hold them. The rounds in
    flight are the ones after the last recorded, in order: the first is state.round + 1."""

    keys: RoundKeys
    futures: dict[str, Future]
    submit_s: float


@dataclass
class _Driver:
    """The run as the driver drives it: what it writes to, where the run stands, and the chain
    on the cluster (where it starts, which attempt it is, the rounds in flight)."""

    client: Client
    setup: RunSetup
    run_dir: RunDir
    writer: CheckpointWriter
    state: RunState
    data: ShardSet
    callbacks: Any
    link: ChainLink | None = None  # None: (re)start from the driver's state
    attempt: int = 0
    scatter_s: float = 0.0
    scatter_bytes: int = 0  # the carry's tensors, one copy to each worker, at a (re)start
    reloaded: int = 0  # shards moved to another worker since the last row
    workers_seen: frozenset[str] | None = None  # worker ids of the chain's first round
    in_flight: deque[_Submitted] = field(default_factory=deque)
    held: _Submitted | None = None  # the last recorded round, where its weights stay there

    @property
    def timeout(self) -> float:
        return self.setup.config.timeout

    def drop(self) -> None:
        """Release every round in flight (their tasks are cancelled) and restart later."""
        self.in_flight.clear()
        self.link = None


def run_chained(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    state: RunState,
    data: ShardSet,
    callbacks: Any,
    rounds: Callable[[_Driver], None] | None = None,
) -> None:
    """Rounds state.round + 1 .. config.rounds, recorded in order (loop.train's contract),
    their checkpoints written in the background; a lost cluster's error (ClusterLost: the
    scheduler went, or a round failed too often) names what was saved (the last write
    finished first). `rounds` runs them: a Dask graph per round (here), or segments of
    rounds inside one task per worker (segments.py, --collective torch)."""
    try:
        with CheckpointWriter() as writer:
            (rounds or _run)(_Driver(client, setup, run_dir, writer, state, data, callbacks))
    except ClusterLost as err:
        t = state.round + 1  # the first round not recorded
        saved = state.saved_round
        raise ClusterLost(lost_message(setup.config, run_dir.root, t, str(err), saved)) from None


def _run(driver: _Driver) -> None:
    """The rounds, each recorded once its figures are on the driver, the next ones already
    submitted; a round whose workers were lost runs again, up to MAX_ROUND_ATTEMPTS times."""
    client, setup, run_dir, state = driver.client, driver.setup, driver.run_dir, driver.state
    config = setup.config
    attempts = 1  # of the round waited for: each failure leaves it for the next attempt
    last_row_at = time.perf_counter()
    while state.round < config.rounds:
        t = state.round + 1
        try:
            _fill(driver)
            head = driver.in_flight[0]
            taken = fetch.take_round(client, state, head.keys, head.futures, config.timeout)
        except WORKER_LOST as err:
            attempts += 1
            check_scheduler(client, config.timeout)  # the scheduler itself gone: stop now
            if attempts > MAX_ROUND_ATTEMPTS:
                raise ClusterLost(
                    f"round {t} failed {MAX_ROUND_ATTEMPTS} times as workers were lost "
                    f"({type(err).__name__}: {err})"
                ) from None
            _restart(driver)
            continue
        # Round t's results are on the driver: release its keys (the next round keeps what it
        # reads), or each worker holds a model copy more; unless its weights stayed there.
        driver.in_flight.popleft()
        driver.held = None if taken.weights else head
        if taken.weights:
            head.futures.clear()
        if t == config.rounds:
            driver.drop()  # nothing follows: the carry need not outlive the run's last round
        run_state.check_finite(taken.result, t, run_dir, state.saved_round, taken.finite)
        seen = frozenset(taken.result.compute_by_worker)  # the worker processes it ran on
        if driver.workers_seen is None:
            driver.workers_seen = seen
        elif seen != driver.workers_seen:  # others than the chain's first round's
            # A worker was lost and Dask ran its tasks elsewhere: the results are still exact.
            _restart(driver)
        now = time.perf_counter()
        row = _record(driver, taken, attempts, now - last_row_at)
        # Where the driver's time went (Callbacks.on_timings): for benchmarks, not the row.
        timings = {"scatter_s": driver.scatter_s, "submit_s": head.submit_s, **taken.waited}
        driver.callbacks.on_timings(t, timings)
        last_row_at, attempts = now, 1
        driver.scatter_s, driver.scatter_bytes, driver.reloaded = 0.0, 0, 0
        driver.callbacks.on_round(row)
        if _ends(driver, row):
            break
    driver.drop()


def _ends(
    driver: _Driver, row: dict[str, Any], take: Callable[[_Driver], None] | None = None
) -> bool:
    """Whether the run stops after this round (its weights then taken, by `take` (default:
    from the round left on the cluster), and saved); on_weights."""
    state = driver.state
    stop = stops_early(driver.setup.config, row, state.since_best)
    if stop and state.weights_round < state.round:  # the run ends here: its weights saved
        (take or _take_held)(driver)
        run_state.save_run(
            driver.run_dir, state, driver.setup, improved=False, writer=driver.writer
        )
    if state.weights_round == state.round:
        driver.callbacks.on_weights(state.round, state.weights)
    return stop


def _take_held(driver: _Driver) -> None:
    """The weights of the last recorded round, left on the cluster, into the state (a restart
    of the chain and an early end need them)."""
    held, state = driver.held, driver.state
    assert held is not None, "a round without its weights on the driver is held"
    full, _ = fetch.take_update(driver.client, held.keys, held.futures, driver.timeout)
    state.weights, state.buffers, state.state = full.weights, full.buffers, full.state
    state.weights_round = state.round
    driver.held = None


def _record(driver: _Driver, taken: Taken, attempts: int, wall_s: float) -> dict[str, Any]:
    """The round's row, written, checkpointed (by the writer, in the background, if the
    driver took the round's weights) and published. The previous round's checkpoint is whole
    before this row is written. `driver_bytes`: what the driver fetched of the round
    (fetch.take_round: the weights and state only when it took them, the shards' states) and
    the carry sent to every worker where the chain (re)started; `wall_s` runs from the
    previous row: the round as a user waits for it."""
    setup, state, run_dir = driver.setup, driver.state, driver.run_dir
    driver.writer.wait()
    row = round_row(
        round_index=state.round + 1,
        strategy=setup.strategy,
        result=taken.result,
        evaluation=taken.evaluation,
        wall_s=wall_s,
        totals=state.advance(taken.result, taken.evaluation, weights=taken.weights),
        driver={
            "attempts": attempts,
            "shards_reloaded": driver.reloaded,
            "driver_bytes": taken.fetched + driver.scatter_bytes,
            "round_form": round_form(setup.config.collective),
        },
    )
    state.rows.append(row)
    append_metrics(run_dir.metrics, row)
    # The checkpoint before the event: a scheduler lost while the event is published then
    # leaves the round both written and saved (the writer finishes it as the run stops), so
    # the lost-run line names the next round.
    if taken.weights:
        run_state.save_run(run_dir, state, setup, improved=row["is_best"], writer=driver.writer)
    publish_round(driver.client, driver.timeout, run_dir.root.absolute(), driver.data.token, row)
    return row


def _restart(driver: _Driver) -> None:
    """After a lost worker: drop the rounds in flight (the chain restarts from the driver's
    state) and take where the shards live now, counting the shards that moved."""
    driver.drop()
    data = driver.data
    placement = fetch.current_placement(driver.client, data, driver.timeout)
    driver.reloaded += sum(a != b for a, b in zip(data.placement, placement, strict=True))
    driver.data = replace(data, placement=placement)


def _fill(driver: _Driver) -> None:
    """Submit rounds until ROUNDS_IN_FLIGHT are on the cluster (or the run's last round)."""
    config, data = driver.setup.config, driver.data
    if driver.link is None:
        _start(driver)
    last = driver.state.round + len(driver.in_flight)  # they follow the last one recorded
    while len(driver.in_flight) < ROUNDS_IN_FLIGHT and last < config.rounds:
        started = time.perf_counter()
        t = last + 1
        evaluate = t % config.eval_every == 0 or t == config.rounds
        graph, keys = build_round(
            run_state.round_input_of(driver.setup, t, data.placement),
            shards=data.shards,
            placement=data.placement,
            link=driver.link,
            token=f"{data.token}a{driver.attempt}",
            evaluate=data.test if evaluate else None,
            # Round t's weights come to the driver and are saved every --checkpoint-every
            # rounds, and at the run's last round; otherwise its figures alone.
            light=t % config.checkpoint_every != 0 and t != config.rounds,
        )
        wanted = keys.held()
        futures = dict(zip(wanted, driver.client.get(graph, wanted, sync=False), strict=True))
        driver.link = keys.link(futures)
        # The link alone takes the update's task on: kept with the round, its carry (round
        # t - 1's update) would outlive the next round's start while the round is recorded.
        keys = replace(keys, update_tasks=None)
        submit_s = time.perf_counter() - started
        driver.in_flight.append(_Submitted(keys=keys, futures=futures, submit_s=submit_s))
        last = t


def _start(driver: _Driver) -> None:
    """(Re)start the chain: the driver's state, sent once, replicated on every worker."""
    started = time.perf_counter()
    if driver.state.weights_round < driver.state.round:  # left on the cluster: restart there
        _take_held(driver)
    driver.attempt += 1
    driver.workers_seen = None
    future = fetch.scatter_carry(driver)
    driver.link = ChainLink(carry=[future] * len(set(driver.data.placement)))
    driver.scatter_s += time.perf_counter() - started
