"""The driver: the one loop over a run's rounds, for both collectives.

A round source puts the rounds on the cluster and hands the driver each round's figures in
order (fetch.Taken): the Dask graph of each round (pipelined.GraphRounds) or segments of
rounds chained inside one task per worker (segments.SegmentRounds, `--collective torch`).
Everything else is written once, here, on the driver: the retry after a lost worker and its
ClusterLost, recording a round (its row, checkpoint and event), the stop rules and model
selection (decisions.py), taking the weights left on the cluster for an
early end, and following the shards where Dask reloaded them.

A source has four verbs: `next` (the next round, submitting what it needs; raises one of its
`lost` errors when workers were lost), `restart` (after such a loss: the next `next` starts
again from the driver's state, its weights fetched from the cluster where the driver did not
hold them), `take_weights` (the last recorded round's weights into the state) and `close`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from distributed import Client

from ..plan import RunSetup
from ..round.graph import ShardSet
from ..round.tasks import RoundResult
from ..round.transport import round_form
from . import fetch, run_state
from .bounded import check_scheduler, publish_round
from .checkpoint import CheckpointWriter
from .decisions import stops_early
from .errors import ClusterLost, lost_message
from .fetch import Taken
from .metrics import append_metrics, round_row
from .run_state import RunState
from .rundir import RunDir

# A round that fails because workers were lost is run again from the same weights and seeds
# (so the result is unchanged); after this many failures without a recorded round, the run
# stops.
MAX_ROUND_ATTEMPTS = 3


@dataclass
class Driver:
    """The run as the driver drives it: what it writes to, where the run stands, and what the
    round sources share (which attempt at the rounds this is, what the driver sent since the
    last row, the shards' placement)."""

    client: Client
    setup: RunSetup
    run_dir: RunDir
    writer: CheckpointWriter
    state: RunState
    data: ShardSet
    callbacks: Any
    attempt: int = 0  # the (re)starts so far: names the chain or segment on the workers
    scatter_s: float = 0.0
    scatter_bytes: int = 0  # the carry's tensors, one copy to each worker, at a (re)start
    reloaded: int = 0  # shards moved to another worker since the last row

    @property
    def timeout(self) -> float:
        return self.setup.config.timeout

    def follow_shards(self) -> None:
        """Take where the shards live now (Dask reloads a lost worker's), counting moves."""
        placement = fetch.current_placement(self.client, self.data, self.timeout)
        self.reloaded += sum(a != b for a, b in zip(self.data.placement, placement, strict=True))
        self.data = replace(self.data, placement=placement)

    def adopt(self, result: RoundResult) -> None:
        """The last recorded round's weights, fetched from the cluster, into the state."""
        state = self.state
        state.weights, state.buffers, state.state = result.weights, result.buffers, result.state
        state.weights_round = state.round


class RoundSource(Protocol):
    lost: tuple[type[BaseException], ...]

    def next(self, driver: Driver) -> Taken: ...
    def restart(self, driver: Driver, err: BaseException) -> None: ...
    def take_weights(self, driver: Driver) -> None: ...
    def close(self, driver: Driver, error: BaseException | None) -> None: ...


def run_rounds(
    client: Client,
    setup: RunSetup,
    run_dir: RunDir,
    state: RunState,
    data: ShardSet,
    callbacks: Any,
    source: Callable[[], RoundSource],
) -> None:
    """Rounds state.round + 1 .. config.rounds from `source`, recorded in order, their
    checkpoints written in the background; a lost cluster's error (ClusterLost: the scheduler
    went, or a round failed too often) names what was saved (the last write finished first)."""
    try:
        with CheckpointWriter() as writer:
            _loop(Driver(client, setup, run_dir, writer, state, data, callbacks), source())
    except ClusterLost as err:
        t = state.round + 1  # the first round not recorded
        saved = state.saved_round
        raise ClusterLost(lost_message(setup.config, run_dir.root, t, str(err), saved)) from None


def _loop(driver: Driver, source: RoundSource) -> None:
    """Each round recorded once its figures are on the driver; a round whose workers were
    lost runs again, up to MAX_ROUND_ATTEMPTS times."""
    state, config = driver.state, driver.setup.config
    attempts = 1  # of the next round: each failure leaves it for the next attempt
    last_row_at = time.perf_counter()
    try:
        while state.round < config.rounds:
            try:
                taken = source.next(driver)
            except source.lost as err:
                attempts += 1
                check_scheduler(driver.client, config.timeout)  # the scheduler gone: stop now
                if attempts > MAX_ROUND_ATTEMPTS:
                    cause = getattr(err, "cause", err)
                    raise ClusterLost(
                        f"round {state.round + 1} failed {MAX_ROUND_ATTEMPTS} times as workers "
                        f"were lost ({type(cause).__name__}: {cause})"
                    ) from None
                source.restart(driver, err)
                continue
            run_state.check_finite(
                taken.result, state.round + 1, driver.run_dir, state.saved_round, taken.finite
            )
            now = time.perf_counter()
            row = _record(driver, taken, attempts, now - last_row_at)
            # Where the driver's time went (Callbacks.on_timings): for benchmarks, not the row.
            timings = {"scatter_s": driver.scatter_s, **taken.waited}
            driver.callbacks.on_timings(state.round, timings)
            driver.scatter_s, driver.scatter_bytes, driver.reloaded = 0.0, 0, 0
            last_row_at, attempts = now, 1
            driver.callbacks.on_round(row)
            if _ends(driver, source, row):
                break
    except BaseException as err:
        source.close(driver, err)
        raise
    source.close(driver, None)


def _ends(driver: Driver, source: RoundSource, row: dict[str, Any]) -> bool:
    """Whether the run stops after this round (its weights then taken from the cluster and
    saved); on_weights."""
    state = driver.state
    stop = stops_early(driver.setup.config, row, state.since_best)
    if stop and state.weights_round < state.round:  # the run ends here: its weights saved
        source.take_weights(driver)
        run_state.save_run(
            driver.run_dir, state, driver.setup, improved=False, writer=driver.writer
        )
    if state.weights_round == state.round:
        driver.callbacks.on_weights(state.round, state.weights)
    return stop


def _record(driver: Driver, taken: Taken, attempts: int, wall_s: float) -> dict[str, Any]:
    """The round's row, written, checkpointed (by the writer, in the background, if the
    driver took the round's weights) and published. The previous round's checkpoint is whole
    before this row is written. `driver_bytes`: what the driver fetched of the round (the
    weights and state only when it took them, the shards' states) and the carry sent to every
    worker where the rounds (re)started; `wall_s` runs from the previous row: the round as a
    user waits for it."""
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
