"""The Dask graph's rounds (driver.py's round source): chained on the cluster, the driver off
their path.

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
there (GraphRounds.take_weights): the same weights and seeds, so the same results.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace

from distributed import Future
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError
from distributed.scheduler import KilledWorker

from ..round.graph import ChainLink, RoundKeys, build_round
from . import fetch, run_state
from .decisions import checkpointed, evaluated
from .driver import Driver
from .fetch import Taken

# Rounds submitted ahead of the one recorded: 2 hides the driver's work of one round.
ROUNDS_IN_FLIGHT = 2
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
class GraphRounds:
    """The chain of rounds on the cluster: where it starts (None: from the driver's state),
    the rounds in flight, the last recorded round while its weights stay there, and the
    worker processes its first round ran on."""

    lost = WORKER_LOST
    link: ChainLink | None = None
    in_flight: deque[_Submitted] = field(default_factory=deque)
    held: _Submitted | None = None
    workers_seen: frozenset[str] | None = None

    def next(self, driver: Driver) -> Taken:
        """The next round's figures (its weights too where the driver takes them), the rounds
        after it submitted first; where it ran on other workers than the chain's first round
        (a worker lost, its tasks rerun elsewhere: the results are still exact), the chain
        restarts after it."""
        config, state = driver.setup.config, driver.state
        self._fill(driver)
        head = self.in_flight[0]
        taken = fetch.take_round(driver.client, state, head.keys, head.futures, config.timeout)
        # Its results are on the driver: release its keys (the next round keeps what it
        # reads), or each worker holds a model copy more; unless its weights stayed there.
        self.in_flight.popleft()
        self.held = None if taken.weights else head
        if taken.weights:
            head.futures.clear()
        if state.round + 1 == config.rounds:
            self._drop()  # nothing follows: the carry need not outlive the run's last round
        seen = frozenset(taken.result.compute_by_worker)  # the worker processes it ran on
        if self.workers_seen is None:
            self.workers_seen = seen
        elif seen != self.workers_seen:
            self.restart(driver, None)
        return replace(taken, waited={"submit_s": head.submit_s, **taken.waited})

    def restart(self, driver: Driver, err: BaseException | None) -> None:
        """Drop the rounds in flight (the chain restarts from the driver's state) and take
        where the shards live now."""
        self._drop()
        driver.follow_shards()

    def take_weights(self, driver: Driver) -> None:
        """The last recorded round's weights, left on the cluster, into the state."""
        held = self.held
        assert held is not None, "a round without its weights on the driver is held"
        full, _ = fetch.take_update(driver.client, held.keys, held.futures, driver.timeout)
        driver.adopt(full)
        self.held = None

    def close(self, driver: Driver, error: BaseException | None) -> None:
        self._drop()

    def _drop(self) -> None:
        """Release every round in flight (their tasks are cancelled) and restart later."""
        self.in_flight.clear()
        self.link = None

    def _fill(self, driver: Driver) -> None:
        """Submit rounds until ROUNDS_IN_FLIGHT are on the cluster (or the run's last)."""
        config, data = driver.setup.config, driver.data
        if self.link is None:
            self._start(driver)
        last = driver.state.round + len(self.in_flight)  # they follow the last one recorded
        while len(self.in_flight) < ROUNDS_IN_FLIGHT and last < config.rounds:
            started = time.perf_counter()
            t = last + 1
            graph, keys = build_round(
                run_state.round_input_of(driver.setup, t, data.placement),
                shards=data.shards,
                placement=data.placement,
                link=self.link,
                token=f"{data.token}a{driver.attempt}",
                evaluate=data.test if evaluated(config, t) else None,
                # Round t's weights come to the driver where they are saved; else its figures.
                light=not checkpointed(config, t),
            )
            wanted = keys.held()
            futures = dict(zip(wanted, driver.client.get(graph, wanted, sync=False), strict=True))
            self.link = keys.link(futures)
            # The link alone takes the update's task on: kept with the round, its carry
            # (round t - 1's update) would outlive the next round's start while the round
            # is recorded.
            keys = replace(keys, update_tasks=None)
            submit_s = time.perf_counter() - started
            self.in_flight.append(_Submitted(keys=keys, futures=futures, submit_s=submit_s))
            last = t

    def _start(self, driver: Driver) -> None:
        """(Re)start the chain: the driver's state, sent once, replicated on every worker."""
        started = time.perf_counter()
        if driver.state.weights_round < driver.state.round:  # left on the cluster: from there
            self.take_weights(driver)
        driver.attempt += 1
        self.workers_seen = None
        future = fetch.scatter_carry(driver)
        self.link = ChainLink(carry=[future] * len(set(driver.data.placement)))
        driver.scatter_s += time.perf_counter() - started
