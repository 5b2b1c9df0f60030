"""A round's worker functions: one task per worker per phase, rounds chained (graph.py).

Each runs all of a worker's shards (tasks.run_local) and sends on the sums of its whole
subtrees (aggregate.owned_nodes), which cross by all-gather: every worker completes the
pairwise tree itself, finishes the phase itself and, after the last phase, makes the round's
update itself. Each worker holds the new weights when the round ends, and no hop is spent
sending a phase's end around (a few vector operations, repeated). These are the same
functions on the same numbers in the same order as the reference's (reference.py), so all
agree to the last bit.

A round's carry is what it starts from: the previous round's RoundResult on the cluster, or,
when the driver (re)starts the chain, a RoundResult it scattered to every worker. A round's
first task takes the previous round's update as a task of its own, run inline (graph.py).

A phase task's result holds the subtree sums (and, after the last phase, its shards' states)
and nothing else: its shards' reports, which its next phase takes, wait in kept.py, the one
state these functions keep between tasks; a report not found there is computed again.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..protocol import Broadcast
from . import comm, kept, transport
from .aggregate import Partial, ShardReport, TreeNode, node_sum, to_partial, tree_root
from .shards import ShardData
from .tasks import (
    PhaseEnd,
    RoundInput,
    RoundResult,
    RoundStatic,
    finish_phase,
    run_local,
    update_round,
)
from .wire import register_dataclasses


@dataclass(frozen=True, kw_only=True)
class WorkerPhase:
    """One worker's output of one phase.

    `nodes` travel to every worker; `shard_states` (after the last phase, each of its shards'
    state for the next round) stay with it: nodes_of() hands the others the nodes alone. The
    shards' reports, which the worker's next phase receives as `previous`, are kept apart
    (kept.py).
    """

    nodes: dict[TreeNode, Partial]
    shard_states: dict[int, Any] | None = None


register_dataclasses(WorkerPhase)

# What a round the driver does not take the weights of holds in their place.
NO_WEIGHTS = torch.empty(0)


def open_round(static: RoundStatic, carry: RoundResult) -> tuple[RoundInput, Any]:
    """Round t's input, and its opening as phase 0 receives it (None if the strategy sends
    none): the reference's round_start and every worker make them with this one function,
    from the round's carry (a RoundResult, or the reference's RunState)."""
    opening = static.strategy.opening(carry.state)
    round_input = RoundInput(
        **vars(static),
        round_data=static.strategy.round_data(carry.state),
        opening_bytes=comm.payload_bytes(opening),
        buffers=carry.buffers,
    )
    return round_input, Broadcast(tensors=opening) if opening else None


def phase_total(
    outputs: list[WorkerPhase], num_shards: int, weights: torch.Tensor, encoding: str
) -> Partial:
    """The phase's sum over all shards, from every worker's subtree sums as they travelled
    (decoded the same way on every worker: transport.py)."""
    known: dict[TreeNode, Partial] = {}
    for output in outputs:
        known.update({n: transport.decode(p, weights, encoding) for n, p in output.nodes.items()})
    return node_sum(tree_root(num_shards), known, num_shards)


# A phase's earlier phases as a task receives them: every worker's outputs of each, finished
# where they arrive.
Received = list[list[WorkerPhase]]


def phase_ends(
    round_input: RoundInput, received: Received, num_shards: int, weights: Any
) -> list[PhaseEnd]:
    """The ends of the phases in `received`, in order, each finished here by finish_phase
    from every worker's sums."""
    ends: list[PhaseEnd] = []
    for phase, outputs in enumerate(received):
        total = phase_total(outputs, num_shards, weights, round_input.layout.transport)
        ends.append(finish_phase(round_input, phase, total, ends[-1] if ends else None, weights))
    return ends


def run_worker_phase(
    static: RoundStatic,
    phase: int,
    shards: list[ShardData],
    nodes: list[TreeNode],
    carry: RoundResult,
    received: Received,
    before: WorkerPhase | None,
) -> WorkerPhase:
    """Phase `phase` of every shard this worker holds, and the sums of its subtrees `nodes`.

    `received` holds the earlier phases of this round (Received), `before` this worker's
    output of the previous round's last phase, which holds its shards' states (None: they
    come with the carry, or there are none). Each shard's report of the phase before is
    taken from what the worker kept (kept.py, under the round's chain: the run's token and
    attempt), and this phase's reports are kept for the next.
    """
    round_input, opening = open_round(static, carry)
    ends = phase_ends(round_input, received, static.num_shards, carry.weights)
    states = before.shard_states if before is not None else None
    if states is None and carry.shard_states is not None:
        states = {shard.index: carry.shard_states[shard.index] for shard in shards}

    def report(shard: ShardData, p: int) -> ShardReport:
        """The shard's report of phase p: kept by its earlier phase, or computed (again)."""
        if p < phase:
            found = kept.take(static.chain, static.index, p, shard.index)
            if found is not None:
                return found
        previous = report(shard, p - 1) if p > 0 else None
        state = states[shard.index] if states is not None else None
        sent = ends[p - 1] if p > 0 else opening
        return run_local(round_input, p, shard, carry.weights, sent, previous, state)

    if static.threads > 1 and len(shards) > 1:
        with ThreadPoolExecutor(min(static.threads, len(shards))) as pool:
            done = list(pool.map(lambda shard: report(shard, phase), shards))
    else:
        done = [report(shard, phase) for shard in shards]
    reports = {shard.index: r for shard, r in zip(shards, done, strict=True)}
    last = phase == len(static.strategy.phases) - 1
    if not last:
        kept.put(static.chain, static.index, phase, reports)
    leaves: dict[TreeNode, Partial] = {(0, i): to_partial(r) for i, r in reports.items()}
    keeps_states = last and static.strategy.shard_state_type is not None
    encoding = static.layout.transport
    return WorkerPhase(
        nodes={
            node: transport.encode(
                node_sum(node, leaves, static.num_shards), carry.weights, encoding
            )
            for node in nodes
        },
        shard_states={i: r.output.shard_state for i, r in reports.items()}
        if keeps_states
        else None,
    )


def nodes_of(output: WorkerPhase) -> WorkerPhase:
    """The subtree sums alone: what the other workers take of a phase's output."""
    return WorkerPhase(nodes=output.nodes)


def update_on_worker(
    static: RoundStatic, carry: RoundResult, received: Received, last: list[WorkerPhase]
) -> RoundResult:
    """The round's update (tasks.update_round) from the earlier phases (Received) and every
    worker's sums of the last phase, made once on this worker for every task of its that
    takes it (kept.update_once).

    Shard states are not in it: each stays with its worker's last phase output."""

    def make() -> RoundResult:
        round_input, _ = open_round(static, carry)
        ends = phase_ends(round_input, received, static.num_shards, carry.weights)
        total = phase_total(last, static.num_shards, carry.weights, static.layout.transport)
        return update_round(round_input, carry.weights, carry.state, ends, total)

    return kept.update_once(static.chain, static.index, make)


def weights_finite(result: RoundResult) -> bool:
    """Whether the result's weights and buffers are all finite (run where they are)."""
    return bool(torch.isfinite(result.weights).all()) and all(
        bool(torch.isfinite(b).all()) for b in result.buffers.values()
    )


def stripped(result: RoundResult) -> tuple[RoundResult, bool]:
    """On the worker: the result without its model-sized parts, and weights_finite."""
    light = replace(result, weights=NO_WEIGHTS, buffers={}, state=None)
    return light, weights_finite(result)
