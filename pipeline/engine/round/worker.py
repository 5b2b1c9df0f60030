"""A round on a worker: one task per phase, then the update, each for all the worker's shards.

Each phase task runs its shards (tasks.run_local) and sends on the sums of its whole subtrees
(aggregate.owned_nodes), which cross by all-gather: every worker completes the pairwise tree
itself, finishes the phase itself and, after the last phase, makes the round's update itself.
Each worker holds the new weights when the round ends, and no hop is spent sending a phase's
end around. These are the reference's functions on the same numbers in the same order
(reference.py), so all agree to the last bit. The graph (graph.py) and the torch
collective's segments (run/segment.py) run these same functions.

A round's carry is what it starts from: the previous round's RoundResult on the cluster, or,
when the driver (re)starts the chain, a RoundResult it scattered to every worker.

What a worker keeps between its tasks, per chain (the run's token and attempt) and round:
the round as opened, each phase's end, its shards' leaves for their next phase, and the
update it made. So each worker opens a round once, finishes each phase once and makes the
update once, however many of its tasks need them (the next phase, the update task, the next
round's first phase, which runs the update inline, and the scoring). It is a cache, never the
only copy: what is not found (a task moved to another worker after a fault or a steal, an
entry evicted) is made again from the same inputs and seeds, to the same bits. A phase task's
result holds only the subtree sums (and after the last phase its shards' states): the
leaves' own outputs would otherwise travel to every worker, or need a task to split off.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..protocol import Broadcast
from . import transport
from .aggregate import Partial, TreeNode, node_sum, sendable, tree_root
from .shards import ShardData, to_device
from .tasks import PhaseEnd, RoundInput, RoundResult, finish_phase, open_round, run_local
from .tasks import update_round as make_update
from .wire import register_dataclasses
from .worker_state import WORKER


@dataclass(frozen=True, kw_only=True)
class WorkerPhase:
    """One worker's output of one phase.

    `nodes` travel to every worker; `shard_states` (after the last phase, each of its shards'
    state for the next round) stay with it: nodes_of() hands the others the nodes alone.
    """

    nodes: dict[TreeNode, Partial]
    shard_states: dict[int, Any] | None = None


register_dataclasses(WorkerPhase)

# What a round the driver does not take the weights of holds in their place.
NO_WEIGHTS = torch.empty(0)
# A phase's earlier phases as a task receives them: every worker's outputs of each.
Received = list[list[WorkerPhase]]


@dataclass
class _Kept:
    """What this worker keeps of one round of one chain (mutable, under WORKER.lock)."""

    opened: tuple[RoundInput, Broadcast | None] | None = None
    ends: list[PhaseEnd] = field(default_factory=list)
    leaves: dict[tuple[int, int], Partial] = field(default_factory=dict)  # (phase, shard)
    update: weakref.ref | None = None


def _kept(round_input: RoundInput) -> _Kept:
    """The round's record on this worker (worker_state.WORKER; a fresh one, never stored,
    without a chain)."""
    if not round_input.chain:  # the reference's rounds and tests: nothing to keep
        return _Kept()
    return WORKER.round_record(round_input.chain, round_input.index, _Kept)


def phase_total(
    outputs: list[WorkerPhase], num_shards: int, weights: torch.Tensor, encoding: str
) -> Partial:
    """The phase's sum over all shards, from every worker's subtree sums as they travelled
    (decoded the same way on every worker: transport.py)."""
    known: dict[TreeNode, Partial] = {}
    for output in outputs:
        known.update({n: transport.decode(p, weights, encoding) for n, p in output.nodes.items()})
    total = node_sum(tree_root(num_shards), known, num_shards)
    # Summed on a GPU (RoundInput.sums_on_device): the phase ends on the CPU, as everywhere.
    tensors = [*total.tensor_sums.values(), *total.buffer_sums.values()]
    on_gpu = any(t.device.type != "cpu" for t in tensors)
    return to_device(total, torch.device("cpu")) if on_gpu else total


def _opened(static: RoundInput, carry: RoundResult, kept: _Kept) -> tuple[RoundInput, Any]:
    """The round opened from its carry, once on this worker."""
    if kept.opened is None:
        kept.opened = open_round(static, carry)
    return kept.opened


def _ends(
    round_input: RoundInput, received: Received, weights: torch.Tensor, kept: _Kept
) -> list[PhaseEnd]:
    """The ends of the phases in `received`, in order: those this worker finished before, and
    the others finished now (finish_phase, from every worker's sums), once each."""
    ends = kept.ends[: len(received)]
    for phase in range(len(ends), len(received)):
        total = phase_total(
            received[phase], round_input.num_shards, weights, round_input.layout.transport
        )
        ends.append(finish_phase(round_input, phase, total, ends[-1] if ends else None, weights))
    with WORKER.lock:
        if len(kept.ends) < len(ends):
            kept.ends = ends
    return ends


def run_worker_phase(
    static: RoundInput,
    phase: int,
    shards: list[ShardData],
    nodes: list[TreeNode],
    carry: RoundResult,
    received: Received,
    before: WorkerPhase | None,
) -> WorkerPhase:
    """Phase `phase` of every shard this worker holds, and the sums of its subtrees `nodes`.

    `received` holds the earlier phases of this round, `before` this worker's output of the
    previous round's last phase, which holds its shards' states (None: they come with the
    carry, or there are none). Each shard's leaf of the phase before is the one this worker
    kept, or made again; this phase's leaves are kept for the next.
    """
    kept = _kept(static)
    round_input, opening = _opened(static, carry, kept)
    ends = _ends(round_input, received, carry.weights, kept)
    states = before.shard_states if before is not None else None
    if states is None and carry.shard_states is not None:
        states = {shard.index: carry.shard_states[shard.index] for shard in shards}

    def leaf(shard: ShardData, p: int) -> Partial:
        """The shard's leaf of phase p: kept by its earlier phase, or made (again)."""
        with WORKER.lock:
            found = kept.leaves.pop((p, shard.index), None) if p < phase else None
        if found is not None:
            return found
        previous = leaf(shard, p - 1) if p > 0 else None
        state = states[shard.index] if states is not None else None
        sent = ends[p - 1] if p > 0 else opening
        return run_local(round_input, p, shard, carry.weights, sent, previous, state)

    if static.threads > 1 and len(shards) > 1:
        with ThreadPoolExecutor(min(static.threads, len(shards))) as pool:
            done = list(pool.map(lambda shard: leaf(shard, phase), shards))
    else:
        done = [leaf(shard, phase) for shard in shards]
    leaves = {shard.index: r for shard, r in zip(shards, done, strict=True)}
    last = phase == len(static.strategy.phases) - 1
    if not last and static.chain:
        with WORKER.lock:
            kept.leaves.update({(phase, i): r for i, r in leaves.items()})
    known: dict[TreeNode, Partial] = {(0, i): r for i, r in leaves.items()}
    encoding = static.layout.transport
    sums = {node: sendable(node_sum(node, known, static.num_shards)) for node in nodes}
    keeps_states = last and static.strategy.shard_state_type is not None
    return WorkerPhase(
        nodes={node: transport.encode(s, carry.weights, encoding) for node, s in sums.items()},
        shard_states={i: r.output.shard_state for i, r in leaves.items()} if keeps_states else None,
    )


def nodes_of(output: WorkerPhase) -> WorkerPhase:
    """The subtree sums alone: what the other workers take of a phase's output."""
    return WorkerPhase(nodes=output.nodes)


def update_on_worker(
    static: RoundInput, carry: RoundResult, received: Received, last: list[WorkerPhase]
) -> RoundResult:
    """The round's update (tasks.update_round) from the earlier phases (Received) and every
    worker's sums of the last phase, made once on this worker for every task of its that
    takes it. Shard states are not in it: each stays with its worker's last phase output."""
    kept = _kept(static)

    def make() -> RoundResult:
        round_input, _ = _opened(static, carry, kept)
        ends = _ends(round_input, received, carry.weights, kept)
        total = phase_total(last, static.num_shards, carry.weights, static.layout.transport)
        return make_update(round_input, carry.weights, carry.state, ends, total)

    return _update_once(kept, make)


def _update_once(kept: _Kept, make: Callable[[], RoundResult]) -> RoundResult:
    """The round's update as this worker made it first, else make() (and note it).

    The update task runs first (its round was submitted first) and Dask holds its result
    while later tasks need it; only a weak reference is noted here, so nothing outlives
    Dask's copy. Once made, the round's opening, ends and leaves are no longer needed."""
    with WORKER.lock:
        update = kept.update() if kept.update is not None else None
    if update is not None:
        return update
    update = make()
    with WORKER.lock:
        kept.update = weakref.ref(update)
        kept.opened, kept.ends, kept.leaves = None, [], {}
    return update


def weights_finite(result: RoundResult) -> bool:
    """Whether the result's weights and buffers are all finite (run where they are)."""
    return bool(torch.isfinite(result.weights).all()) and all(
        bool(torch.isfinite(b).all()) for b in result.buffers.values()
    )


def stripped(result: RoundResult) -> tuple[RoundResult, bool]:
    """On the worker: the result without its model-sized parts, and weights_finite."""
    light = replace(result, weights=NO_WEIGHTS, buffers={}, state=None)
    return light, weights_finite(result)
