"""Rounds chained inside one task per worker (`--collective torch`), as xgboost.dask runs its
collective: Dask places, pins and watches the tasks; a gloo group (round/group.py) moves the
sums.

Each rank runs the same functions a round's Dask graph runs, in the same order: its
shards' phase (worker.run_worker_phase), every worker's subtree sums taken (here by the
group's exchange, round/exchange.py, instead of a Dask transfer), the round's update made
from them (worker.update_on_worker), its own pieces scored (scoring.score_pieces) and every
worker's scores combined. So a segment's weights are the Dask run's and the reference's, bit
for bit; no algorithm or phase function knows which collective ran it.

Every rank reaches the same decisions from the same numbers: the model selection (which
round's weights the driver must save as best.pt), the stop rules (--stop-at-accuracy,
--patience, divergence), and the flags each rank adds to its first all-gather of a round
(its task cancelled by the driver; rank 0: the segment past SEGMENT_SECONDS). The segment
ends after the round where any of them says so.

What the driver records arrives through a Dask Queue, off the round's path (a thread puts it
while the next round computes): rank 0's figures of each round, with the weights where the
driver saves them (a checkpoint round, a new best, the segment's last), and every rank's
shards' states where the strategy has them. Each rank keeps its last few rounds' results
(round/worker_state.py), so that after a lost peer the driver restarts from the last round
it recorded (kept_result).
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
from dataclasses import replace
from typing import Any

import torch
from distributed import Queue, Variable, get_client, get_worker
from distributed.comm import get_address_host
from distributed.protocol import to_serialize

from ..round.exchange import exchange_phase
from ..round.group import Group, GroupFailed, GroupSpec, store_variable_name
from ..round.scoring import combine_scores, score_pieces
from ..round.tasks import RoundInput, RoundResult
from ..round.worker import (
    WorkerPhase,
    run_worker_phase,
    stripped,
    update_on_worker,
    weights_finite,
)
from ..round.worker_state import WORKER
from .decisions import checkpointed, evaluated
from .segment_plan import RoundMessage, SegmentPlan


class LandedElsewhere(RuntimeError):
    """A segment's task ran on another worker than the one it was pinned to (its worker was
    lost and Dask moved it): the group's other ranks are elsewhere, so it must not join."""


def kept_result(chain: str, round_index: int) -> tuple[RoundResult, dict[int, Any] | None] | None:
    """Round `round_index`'s result as this worker made it in segment `chain` (with its own
    shards' states), if it is among the last kept (worker_state.RESULTS_KEPT); run by the
    driver (client.run)."""
    return WORKER.kept_result(chain, round_index)


class _Publisher:
    """Puts a rank's messages on the segment's Dask Queue from a thread of its own, in
    order, so that a round's next computation does not wait on the scheduler."""

    def __init__(self, name: str):
        self._queue = Queue(name, client=get_client())
        self._pending: queue.Queue[RoundMessage | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while (message := self._pending.get()) is not None:
            # The scheduler gone: the driver sees the run fail, and the segment ends with it.
            # Wrapped: the scheduler holds and forwards its frames as they are, never
            # unpickling them (a round's 46.7 MB of weights: 0.09 s a put, not 0.35).
            with contextlib.suppress(Exception):
                self._queue.put(to_serialize(message))

    def put(self, message: RoundMessage) -> None:
        self._pending.put(message)

    def close(self) -> None:
        """Every message put before this delivered (or failed)."""
        self._pending.put(None)
        self._thread.join()


def _cancelled() -> bool:
    """Whether the driver released or cancelled this task (it ran on, as Dask cannot stop a
    running thread): read from the worker's own state, no message sent."""
    worker = get_worker()
    task = worker.state.tasks.get(worker.get_current_task())
    return task is None or task.state in ("cancelled", "released", "forgotten")


def form_group(spec: GroupSpec, rank: int, host: str) -> Group:
    """The segment's group: rank 0 opens the store and names it in a Dask Variable."""
    variable = Variable(store_variable_name(spec), client=get_client())
    if rank == 0:
        group, address = Group.hosting(spec, host)
        variable.set(list(address))
        group.join(host)
        return group
    try:
        address = variable.get(timeout=spec.timeout_s)
    except TimeoutError:
        raise GroupFailed(f"rank 0 of {spec.name} did not open its store in time") from None
    return Group(spec, rank, host, (address[0], int(address[1])))


def run_segment(
    plan: SegmentPlan,
    static: RoundInput,
    rank: int,
    address: str,
    shards: list[Any],
    nodes: list[Any],
    pieces: tuple[list[int], list[Any]],
    carry: RoundResult,
) -> int:
    """Rounds plan.first .. (at most) plan.rounds on this rank's `shards`; returns the last
    round it finished. `address` is the worker it was pinned to (LandedElsewhere if not),
    `nodes` the subtrees whose sums it sends (aggregate.owned_nodes), `pieces` its scoring
    pieces with their indices, `carry` the round it starts from."""
    worker = get_worker()
    if worker.address != address:
        raise LandedElsewhere(f"rank {rank} of {plan.group.name} meant for {address}")
    group = form_group(plan.group, rank, get_address_host(address))
    group.on_devices(shards[0].x.device if shards else torch.device("cpu"))
    publisher = _Publisher(plan.queue) if rank == 0 or plan.has_states else None
    try:
        chained = replace(static, chain=plan.group.name)
        return _rounds(plan, chained, group, (shards, nodes, pieces), carry, publisher)
    finally:
        group.close()
        if publisher is not None:
            publisher.close()
        if rank == 0:
            Variable(store_variable_name(plan.group), client=get_client()).delete()


def _rounds(
    plan: SegmentPlan,
    static: RoundInput,
    group: Group,
    held: tuple[list[Any], list[Any], tuple[list[int], list[Any]]],
    carry: RoundResult,
    publisher: _Publisher | None,
) -> int:
    """The segment's rounds, one after the other, until a decision every rank shares ends it."""
    shards, nodes, pieces = held
    started = time.perf_counter()

    def flag() -> bool:  # this rank's reason to end the segment after the round
        late = group.rank == 0 and time.perf_counter() - started > plan.seconds
        return late or _cancelled()

    selection, before, t = plan.selection, None, plan.first
    while True:
        static = replace(static, index=t)
        result, before, flagged = _one_round(static, group, (shards, nodes), carry, before, flag)
        evaluation = _evaluate(plan, static, group, pieces, result)
        selected = selection.would_select(evaluation)
        selection = selection.advance(evaluation)
        loss = result.metrics.get("train_loss")
        finite = weights_finite(result) and (loss is None or math.isfinite(loss))
        ends = flagged or not finite or selection.stops(evaluation) or t == plan.rounds
        states = before.shard_states if before is not None else None
        WORKER.keep_result(static.chain, t, result, states)
        if publisher is not None:
            weights = ends or selected or checkpointed(plan, t)
            message = RoundMessage(round=t, rank=group.rank, ends=ends, shard_states=states)
            if group.rank == 0:
                sent = result if weights else stripped(result)[0]
                message = replace(
                    message, result=sent, finite=finite, evaluation=evaluation, weights=weights
                )
            publisher.put(message)
        if ends:
            return t
        carry, t = result, t + 1


def _one_round(
    static: RoundInput,
    group: Group,
    held: tuple[list[Any], list[Any]],
    carry: RoundResult,
    before: WorkerPhase | None,
    flag: Any,
) -> tuple[RoundResult, WorkerPhase | None, bool]:
    """One round on this rank: each phase of its shards, every rank's sums all-gathered, the
    update made from them; what its next round starts from (its last phase's output, which
    holds its shards' states, if the strategy keeps any); and whether any rank flagged the
    segment's end in its first all-gather."""
    shards, nodes = held
    received: list[list[WorkerPhase]] = []
    flagged = False
    for p in range(len(static.strategy.phases)):
        began = time.perf_counter()
        output = run_worker_phase(static, p, shards, nodes, carry, received, before)
        phase, raised = exchange_phase(
            group, output.nodes, count=static.num_shards, encoding=static.layout.transport,
            flag=flag() if p == 0 else False, own_seconds=time.perf_counter() - began,
            tag=f"phase-{p}",
        )  # fmt: skip
        received.append(phase)
        flagged = flagged or raised
    result = update_on_worker(static, carry, received[:-1], received[-1])
    keeps = static.strategy.shard_state_type is not None
    return result, output if keeps else None, flagged


def _evaluate(
    plan: SegmentPlan,
    static: RoundInput,
    group: Group,
    pieces: tuple[list[int], list[Any]],
    result: RoundResult,
) -> dict[str, float] | None:
    """The round's scores over every rank's pieces (None: not evaluated), combined on each
    rank from the same all-gathered scores (scoring.combine_scores)."""
    if not evaluated(plan, static.index):
        return None
    began = time.perf_counter()
    scored = score_pieces(static.spec, *pieces, result)
    gathered = group.allgather(scored, time.perf_counter() - began, tag="scores")
    return combine_scores(*gathered)
