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
there (fetch.take_held): the same weights and seeds, so the same results.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from distributed import Client, Future

from ..round import comm
from ..round.graph import ChainLink, RoundKeys, ShardSet, build_round
from ..round.tasks import RoundResult
from ..setup.run_setup import RunSetup
from . import fetch, run_state
from .checkpoint import CheckpointWriter
from .cluster import bounded, check_scheduler, publish_round, wait_for
from .errors import give_up_after
from .metrics import append_metrics, round_row, stops_early
from .run_state import RunState
from .rundir import RunDir

# Rounds submitted ahead of the one recorded: 2 hides the driver's work of one round.
ROUNDS_IN_FLIGHT = 2


@dataclass
class _Submitted:
    """A round on the cluster: its output keys and the futures that hold them."""

    index: int
    keys: RoundKeys
    futures: dict[str, Future]
    submit_s: float


@dataclass
class _Chain:
    """The chain as the driver sees it: where it starts and which attempt it is."""

    link: ChainLink | None = None  # None: (re)start from the driver's state
    attempt: int = 0
    scatter_s: float = 0.0
    scatter_bytes: int = 0  # the carry's tensors, one copy to each worker, at a (re)start
    reloaded: int = 0  # shards moved to another worker since the last row
    workers_seen: frozenset[str] | None = None  # worker ids of the chain's first round
    in_flight: deque[_Submitted] = field(default_factory=deque)
    held: _Submitted | None = None  # the last recorded round, where its weights stay there

    def drop(self) -> None:
        """Release every round in flight (their tasks are cancelled) and restart later."""
        self.in_flight.clear()
        self.link = None

    def figures(self, attempts: int, fetched: int, collective: str) -> dict[str, Any]:
        """What the driver adds to a round's row. `driver_bytes`: what it fetched of the
        round (fetch.collect: the weights and state only when it took them, the shards'
        states) and the carry sent to every worker where the chain (re)started."""
        return {
            "attempts": attempts,
            "shards_reloaded": self.reloaded,
            "driver_bytes": fetched + self.scatter_bytes,
            "round_form": collective,
        }


def run_chained(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    state: RunState,
    data: ShardSet,
    callbacks: Any,
    lost: tuple[type[BaseException], ...],
    max_attempts: int,
    writer: CheckpointWriter,
) -> None:
    """Rounds state.round + 1 .. config.rounds, recorded in order (loop.train's contract),
    checkpointed by `writer`; ClusterLost if the scheduler goes or a round fails too often."""
    config = setup.config
    chain, failures = _Chain(), dict[int, int]()
    last_row_at = time.perf_counter()
    while state.round < config.rounds:
        t = state.round + 1
        try:
            _fill(client, setup, state, data, chain)
            head = chain.in_flight[0]
            taken = fetch.take_round(client, config, state, t, (head.keys, head.futures))
            result, evaluation, fetched, waited, finite, weights = taken
        except lost as err:
            failures[t] = failures.get(t, 1) + 1
            check_scheduler(client, config.timeout)  # the scheduler itself gone: stop now
            give_up_after(max_attempts, t, failures[t], err)
            data = _restart(client, data, chain, config.timeout)
            continue
        # Round t's results are on the driver: release its keys (the next round keeps what it
        # reads), or each worker holds a model copy more; unless its weights stayed there.
        chain.in_flight.popleft()
        chain.held = None if weights else head
        if weights:
            head.futures.clear()
        if t == config.rounds:
            chain.drop()  # nothing follows: the carry need not outlive the run's last round
        run_state.check_finite(result, t, run_dir, state.saved_round, finite)
        if _workers_changed(chain, result.compute_by_worker):
            # A worker was lost and Dask ran its tasks elsewhere: the results are still exact.
            data = _restart(client, data, chain, config.timeout)
        now = time.perf_counter()
        driver = chain.figures(failures.get(t, 1), fetched, comm.collective_of(config.broadcast))
        row = _record(
            client, setup, (run_dir, writer), state, data, (result, weights), evaluation,
            driver, now - last_row_at,
        )  # fmt: skip
        # Where the driver's time went (Callbacks.on_timings): for benchmarks, not the row.
        callbacks.on_timings(t, {"scatter_s": chain.scatter_s, "submit_s": head.submit_s, **waited})
        last_row_at, chain.scatter_s, chain.scatter_bytes, chain.reloaded = now, 0.0, 0, 0
        callbacks.on_round(row)
        if _ends(client, setup, (run_dir, writer), state, chain, row, callbacks):
            break
    chain.drop()


def _ends(
    client: Client,
    setup: RunSetup,
    saved_by: tuple[RunDir, CheckpointWriter],
    state: RunState,
    chain: _Chain,
    row: dict[str, Any],
    callbacks: Any,
) -> bool:
    """Whether the run stops after this round (its weights then taken, saved); on_weights."""
    stop = stops_early(setup.config, row, state.since_best)
    if stop and state.weights_round < state.round:  # the run ends here: its weights saved
        _take_held(client, setup, state, chain)
        run_state.save_run(saved_by[0], state, setup, improved=False, writer=saved_by[1])
    if state.weights_round == state.round:
        callbacks.on_weights(state.round, state.weights)
    return stop


def _take_held(client: Client, setup: RunSetup, state: RunState, chain: _Chain) -> None:
    """The weights of the last recorded round, left on the cluster, into the state."""
    assert chain.held is not None, "a round without its weights on the driver is held"
    fetch.take_held(client, state, (chain.held.keys, chain.held.futures), setup.config.timeout)
    chain.held = None


def current_placement(client: Client, data: ShardSet, timeout: float) -> list[str]:
    """The worker that holds each shard now (Dask reloads a lost worker's shards elsewhere).

    A shard stays with its previous worker while that worker still holds it; otherwise it is
    placed on a worker that does, so that local tasks never fetch a shard over the network.
    """
    try:
        wait_for(client, data.shards, timeout)  # shards being reloaded after a worker died
        keys = [future.key for future in data.shards]
        holders = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=timeout)
    except OSError:
        check_scheduler(client, timeout)  # ClusterLost if it is the scheduler that went
        raise
    placement = []
    for future, previous in zip(data.shards, data.placement, strict=True):
        where = sorted(holders.get(future.key, ()))
        placement.append(previous if previous in where or not where else where[0])
    return placement


def _record(
    client: Client,
    setup: RunSetup,
    saved_by: tuple[RunDir, CheckpointWriter],
    state: RunState,
    data: ShardSet,
    taken: tuple[RoundResult, bool],
    evaluation: dict[str, float] | None,
    driver: dict[str, Any],
    wall_s: float,
) -> dict[str, Any]:
    """The round's row, written, checkpointed (by the writer, in the background, if the
    driver took the round's weights) and published. The previous round's checkpoint is whole
    before this row is written."""
    run_dir, writer = saved_by
    result, weights = taken
    writer.wait()
    row = round_row(
        round_index=state.round + 1,
        strategy=setup.strategy,
        result=result,
        evaluation=evaluation,
        wall_s=wall_s,  # from the previous row: the round as a user waits for it
        totals=state.advance(result, evaluation, weights=weights),
        driver=driver,
    )
    state.rows.append(row)
    append_metrics(run_dir.metrics, row)
    # The checkpoint before the event: a scheduler lost while the event is published then
    # leaves the round both written and saved (the writer finishes it as the run stops), so
    # the lost-run line names the next round.
    if weights:
        run_state.save_run(run_dir, state, setup, improved=row["is_best"], writer=writer)
    config = setup.config
    publish_round(client, config.timeout, run_dir.root.absolute(), data.token, row)
    return row


def _restart(client: Client, data: ShardSet, chain: _Chain, timeout: float) -> ShardSet:
    """After a lost worker: drop the rounds in flight (the chain restarts from the driver's
    state) and take where the shards live now, counting the shards that moved."""
    chain.drop()
    placement = current_placement(client, data, timeout)
    chain.reloaded += sum(a != b for a, b in zip(data.placement, placement, strict=True))
    return replace(data, placement=placement)


def _workers_changed(chain: _Chain, compute_by_worker: dict[str, float]) -> bool:
    """Whether a round ran on other worker processes than the chain's first round did."""
    seen = frozenset(compute_by_worker)
    if chain.workers_seen is None:
        chain.workers_seen = seen
        return False
    return seen != chain.workers_seen


def _fill(client: Client, setup: RunSetup, state: RunState, data: ShardSet, chain: _Chain) -> None:
    """Submit rounds until ROUNDS_IN_FLIGHT are on the cluster (or the run's last round)."""
    config = setup.config
    if chain.link is None:
        _start(client, setup, state, data, chain)
    last = chain.in_flight[-1].index if chain.in_flight else state.round
    while len(chain.in_flight) < ROUNDS_IN_FLIGHT and last < config.rounds:
        started = time.perf_counter()
        t = last + 1
        evaluate = t % config.eval_every == 0 or t == config.rounds
        graph, keys = build_round(
            run_state.round_static(setup, t, data.placement),
            shards=data.shards,
            placement=data.placement,
            link=chain.link,
            token=f"{data.token}a{chain.attempt}",
            evaluate=data.test if evaluate else None,
            light=not fetch.checkpointed(config.checkpoint_every, config.rounds, t),
        )
        wanted = keys.held()
        futures = dict(zip(wanted, client.get(graph, wanted, sync=False), strict=True))
        chain.link = keys.link(futures)
        # The link alone takes the update's task on: kept with the round, its carry (round
        # t - 1's update) would outlive the next round's start while the round is recorded.
        keys = replace(keys, update_tasks=None)
        chain.in_flight.append(
            _Submitted(index=t, keys=keys, futures=futures, submit_s=time.perf_counter() - started)
        )
        last = t


def _start(client: Client, setup: RunSetup, state: RunState, data: ShardSet, chain: _Chain) -> None:
    """(Re)start the chain: the driver's state, sent once, replicated on every worker."""
    started = time.perf_counter()
    if state.weights_round < state.round:  # left on the cluster: the chain restarts from them
        _take_held(client, setup, state, chain)
    chain.attempt += 1
    chain.workers_seen = None
    carry = RoundResult(
        weights=state.weights,
        state=state.state,
        buffers=state.buffers,
        shard_states=state.shard_states,
    )
    try:
        (future,) = bounded(
            client, setup.config.timeout, client.scatter, [carry], hash=False, broadcast=True
        )
    except KeyError as err:
        raise OSError(f"a worker left while the round's inputs were sent ({err})") from None
    workers = list(dict.fromkeys(data.placement))
    chain.link = ChainLink(carry=[future] * len(workers))
    chain.scatter_s += time.perf_counter() - started
    chain.scatter_bytes += comm.payload_bytes(carry) * len(workers)
