"""The all-gather round's worker functions: one task per worker per phase, rounds chained.

Where tasks.py runs one shard per task and reduces on one worker, these run all of a
worker's shards in one task and hand every other worker the sums of its whole subtrees
(aggregate.owned_nodes); every worker then completes the pairwise tree itself, finishes the
phase itself and, after the last phase, makes the round's update itself. Each worker thus
holds the new weights when the round ends, and the next round starts there without a
broadcast or a trip to the driver. The work is the same functions on the same numbers in the
same order as tasks.py's and the reference's, so all three agree to the last bit; what is
computed on every worker (the phase ends, the update) is a few vector operations, repeated so
that no hop is spent sending their results around.

A round's carry is what it starts from: the previous round's RoundResult on the cluster, or,
when the driver (re)starts the chain, a Carry it scattered to every worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...models.registry import ModelSpec
from ..algorithms import Broadcast, Strategy
from . import comm, transport
from .aggregate import Partial, ShardReport, TreeNode, node_sum, to_partial, tree_root
from .shards import ShardData
from .sizes import register_dataclasses
from .tasks import (
    PhaseEnd,
    RoundInput,
    RoundResult,
    Score,
    finish_phase,
    run_local,
    score_pieces,
    update_round,
)


@dataclass(frozen=True, kw_only=True)
class RoundStatic:
    """What the driver knows of round t before it runs: the same object in each task."""

    strategy: Strategy
    spec: ModelSpec
    seed: int
    index: int  # t, counted from 1
    layout: comm.Layout
    num_shards: int


@dataclass(frozen=True, kw_only=True)
class Carry:
    """What a round starts from when the driver sends it (RoundResult has the same fields)."""

    weights: torch.Tensor
    state: Any
    buffers: dict[str, torch.Tensor]
    shard_states: list[Any] | None = None  # by shard index


@dataclass(frozen=True, kw_only=True)
class WorkerPhase:
    """One worker's output of one phase.

    `nodes` travel to every worker; `reports` (the worker's shards' outputs, which its next
    phase receives as `previous`) and `shard_states` (after the last phase, each of its shards'
    state for the next round) stay with it: nodes_of() hands the others the nodes alone.
    """

    nodes: dict[TreeNode, Partial]
    reports: dict[int, ShardReport] | None = None
    shard_states: dict[int, Any] | None = None


register_dataclasses(WorkerPhase, Carry)


def open_round(static: RoundStatic, carry: Carry | RoundResult) -> tuple[RoundInput, Any]:
    """Round t's input, and its opening as phase 0 receives it (None if the strategy sends
    none): the driver's round_start and every worker make them with this one function."""
    opening = static.strategy.opening(carry.state)
    round_input = RoundInput(
        strategy=static.strategy,
        spec=static.spec,
        seed=static.seed,
        index=static.index,
        layout=static.layout,
        round_data=static.strategy.round_data(carry.state),
        opening_bytes=comm.tensor_bytes(opening),
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


def phase_ends(
    round_input: RoundInput, gathered: list[list[WorkerPhase]], num_shards: int, weights: Any
) -> list[PhaseEnd]:
    """The ends of the phases in `gathered` (each finished by finish_phase, in order)."""
    ends: list[PhaseEnd] = []
    encoding = round_input.layout.transport
    for phase, outputs in enumerate(gathered):
        total = phase_total(outputs, num_shards, weights, encoding)
        ends.append(finish_phase(round_input, phase, total, ends[-1] if ends else None, weights))
    return ends


def run_worker_phase(
    static: RoundStatic,
    phase: int,
    shards: list[ShardData],
    nodes: list[TreeNode],
    carry: Carry | RoundResult,
    gathered: list[list[WorkerPhase]],
    own: WorkerPhase | None,
    before: WorkerPhase | None,
) -> WorkerPhase:
    """Phase `phase` of every shard this worker holds, and the sums of its subtrees `nodes`.

    `gathered` holds every worker's output of each earlier phase (this round), `own` this
    worker's output of the phase before, `before` its output of the previous round's last
    phase, which holds its shards' states (None: they come with the carry, or there are none).
    """
    round_input, opening = open_round(static, carry)
    ends = phase_ends(round_input, gathered, static.num_shards, carry.weights)
    received = ends[-1] if ends else opening
    states = before.shard_states if before is not None else None
    if states is None and carry.shard_states is not None:
        states = {shard.index: carry.shard_states[shard.index] for shard in shards}
    reports = {
        shard.index: run_local(
            round_input,
            phase,
            shard,
            carry.weights,
            received,
            own.reports[shard.index] if own is not None and own.reports else None,
            states[shard.index] if states is not None else None,
        )
        for shard in shards
    }
    leaves: dict[TreeNode, Partial] = {(0, i): to_partial(r) for i, r in reports.items()}
    last = phase == len(static.strategy.phases) - 1
    keeps_states = last and static.strategy.shard_state_type is not None
    states_after = {i: r.output.shard_state for i, r in reports.items()}
    encoding = static.layout.transport
    return WorkerPhase(
        nodes={
            node: transport.encode(
                node_sum(node, leaves, static.num_shards), carry.weights, encoding
            )
            for node in nodes
        },
        reports=None if last else reports,
        shard_states=states_after if keeps_states else None,
    )


def nodes_of(output: WorkerPhase) -> WorkerPhase:
    """The subtree sums alone: what the other workers take of a phase's output."""
    return WorkerPhase(nodes=output.nodes)


def update_on_worker(
    static: RoundStatic, carry: Carry | RoundResult, gathered: list[list[WorkerPhase]]
) -> RoundResult:
    """The round's update from every worker's outputs of every phase (tasks.update_round).

    Shard states are not in it: each stays with its worker's last phase output."""
    round_input, _ = open_round(static, carry)
    ends = phase_ends(round_input, gathered[:-1], static.num_shards, carry.weights)
    last = phase_total(gathered[-1], static.num_shards, carry.weights, static.layout.transport)
    return update_round(round_input, carry.weights, carry.state, ends, last, None)


def score_result(
    spec: ModelSpec, indices: list[int], pieces: list[ShardData], result: RoundResult
) -> list[tuple[int, Score]]:
    """A worker's scoring pieces' sums (scoring.py) for a round's weights and buffers."""
    return score_pieces(spec, indices, pieces, result.weights, result.buffers)
