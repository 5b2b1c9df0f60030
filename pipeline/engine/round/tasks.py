"""A round's phases as pure functions of plain data: module level, no globals.

Each takes plain data (tensors, frozen dataclasses) and returns plain data, so the same
functions serve the workers' tasks (worker.py, which the graph of graph.py and the torch
collective's segments run) and the single-process reference (reference.py). A round's data
takes one path through them: the round opened from its carry (`open_round`), every shard's
`run_local`, the pairwise sums (aggregate.py), each phase finished (`finish_phase`: its
average, its broadcast, its bytes) and the round ended (`update_round`, which finishes the
last phase and calls the strategy's update).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ....models.registry import ModelSpec
from ..protocol import Broadcast, LocalContext, LocalOutput, RoundEnd, Strategy
from . import comm, transport
from .aggregate import Partial, buffer_mean, mean_of, shard_leaf
from .objective import derived_seed
from .scoring import combine_scores, score_piece
from .shards import ShardData, make_objective, to_device, worker_id
from .wire import register_dataclasses


@dataclass(frozen=True, kw_only=True)
class RoundInput:
    """What every task of round t is given besides its data: the same object in each.

    The driver makes it (run_state.round_input) with what it knows before the round runs;
    `open_round` adds what the round's carry decides (the three fields after `chain`), once
    per worker (worker.py) and once in the reference.
    """

    strategy: Strategy
    spec: ModelSpec
    seed: int  # the run's seed
    index: int  # t, counted from 1
    layout: comm.Layout  # where the shards live and how sums travel: the byte counts
    num_shards: int
    # --threads-per-worker: a worker's shards run this many at a time inside its one task,
    # as Dask ran that many one-shard tasks at once (each shard's work is seeded by its own
    # index, so the order they finish in changes nothing).
    threads: int = 1
    # The shards' outputs stay on their device for the sums (the torch collective's segments:
    # NCCL sums them there, round/exchange.py); the round's end is made on the CPU from the
    # sum (worker.phase_total). False: each output comes to the CPU, as the Dask graph sends.
    sums_on_device: bool = False
    # The chain the round belongs to (the run's token and attempt, graph.py): what a worker
    # keeps between its tasks is kept under it (worker.py). "": none (the reference runner).
    chain: str = ""
    round_data: Any = None  # strategy.round_data(driver state as the round starts)
    opening_bytes: int = 0  # bytes of strategy.opening(state), sent with the weights
    # The model's buffers as the round starts (BatchNorm's statistics; {} for most models):
    # a few floats per channel, so they ride with the round's plain data, counted with the
    # weights. Strategies never see them: the pipeline combines them (aggregate.py).
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


def open_round(round_input: RoundInput, carry: Any) -> tuple[RoundInput, Broadcast | None]:
    """Round t's input as its carry (a RoundResult, or the reference's RunState) opens it,
    and its opening as phase 0 receives it (None if the strategy sends none)."""
    opening = round_input.strategy.opening(carry.state)
    opened = replace(
        round_input,
        round_data=round_input.strategy.round_data(carry.state),
        opening_bytes=comm.payload_bytes(opening),
        buffers=carry.buffers,
    )
    return opened, Broadcast(tensors=opening) if opening else None


@dataclass(frozen=True, kw_only=True)
class PhaseEnd:
    """One phase, finished once: what it sent on, its metrics, and what it moved.

    The next phase's shards receive this object (for `broadcast.tensors`); it carries no
    averaged tensors, so nothing beyond the broadcast travels to them.
    """

    broadcast: Broadcast  # what the next phase receives (nothing after the last phase)
    metrics: dict[str, float]  # the phase's averaged metrics and its broadcast's
    comm_bytes: int
    # Sent or gathered tensors at all: a communication round, whatever the layout.
    communicated: bool
    compute_by_worker: dict[str, float]
    rows: int  # rows the shards' work read in this phase
    diagnostics: dict[int, dict[str, float]] = field(default_factory=dict)  # by shard
    # The shards' buffers combined, where this phase's local steps moved them ({}: none);
    # they travel on with the phase's end, and count as its next phase's input.
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """Everything the driver keeps from a round, and what the next round starts from (the
    driver scatters one, without the round's figures, where it (re)starts the chain)."""

    weights: torch.Tensor
    state: Any  # the strategy's driver state for the next round
    # The strategy's averaged metrics, its broadcasts' and update's.
    metrics: dict[str, float] = field(default_factory=dict)
    comm_bytes: int = 0
    comm_phases: int = 0  # phases that moved tensors: the round's communication rounds
    compute_by_worker: dict[str, float] = field(default_factory=dict)
    shard_states: list[Any] | None = None  # each shard's state for the next round, if any
    rows: int = 0  # rows read by all shards' work in the round: images processed
    diagnostics: dict[int, dict[str, float]] = field(default_factory=dict)  # by shard
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # the model's, combined


register_dataclasses(ShardData, RoundInput, PhaseEnd, RoundResult, Broadcast)


def run_local(
    round_input: RoundInput,
    phase: int,
    shard: ShardData,
    weights: torch.Tensor,
    received: PhaseEnd | Broadcast | None,
    previous: Partial | None,
    shard_state: Any = None,
) -> Partial:
    """One shard's work in one phase of one round (`shard_state`: see protocol.py), as the
    leaf of the phase's sums (aggregate.shard_leaf).

    `received` is the previous phase's end, or in phase 0 the round's opening (None when
    the strategy opens with nothing); `previous` is this shard's own leaf of the previous
    phase.
    """
    started = time.perf_counter()
    # Independent, reproducible RNG streams per (run seed, round, shard).
    seed = derived_seed(round_input.seed, round_input.index, shard.index)
    # Inputs arrive on the CPU (that is what travels); the work runs where the shard is, and
    # the output goes back to the CPU for the reduction. On a CPU worker these are no-ops.
    device = shard.x.device
    # On a CPU worker every move is a no-op: skipped, as walking the values costs ~60 us.
    moved_to = to_device if device.type != "cpu" else _as_is
    sent = received.broadcast if isinstance(received, PhaseEnd) else received
    objective = make_objective(round_input.spec, shard, round_input.buffers, seed)
    output = round_input.strategy.local(
        LocalContext(
            phase=phase,
            round_index=round_input.index,
            objective=objective,
            weights=weights.to(device),
            received=moved_to(sent.tensors, device) if sent else {},
            previous=moved_to(previous.output, device) if previous else None,
            rng=torch.Generator().manual_seed(seed),
            shard_state=moved_to(shard_state, device),
            round_data=round_input.round_data,
        )
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # so that compute_s is the work, not its launch
    moved = objective.buffers if objective.buffers_updated else {}
    cpu = torch.device("cpu")
    # Summed where it is under sums_on_device (elementwise: the same bits), else on the CPU.
    back = _as_is if round_input.sums_on_device else moved_to
    return shard_leaf(
        output=back(output, cpu),
        num_samples=int(shard.x.shape[0]),
        compute_s=time.perf_counter() - started,
        worker=worker_id(),
        shard=shard.index,
        buffers=back(moved, cpu),
    )


def _as_is(value: Any, device: torch.device) -> Any:
    return value


def finish_phase(
    round_input: RoundInput,
    phase: int,
    total: Partial,
    previous: PhaseEnd | None,
    weights: torch.Tensor,
) -> PhaseEnd:
    """Average a phase that is not the last, broadcast it, and count what it moved."""
    mean = mean_of(total)
    broadcast = round_input.strategy.broadcast(phase, mean, round_input.round_data)
    return _phase_end(round_input, phase, mean, total, previous, weights, broadcast)


def _phase_end(
    round_input: RoundInput,
    phase: int,
    mean: LocalOutput,
    total: Partial,
    previous: PhaseEnd | None,
    weights: torch.Tensor,
    broadcast: Broadcast,
) -> PhaseEnd:
    """A phase's end: what it sent on, its metrics, and the bytes it moved (comm.py)."""
    # The phase's input: the weights (and the round's opening) in phase 0, else the
    # previous phase's broadcast. Every worker forms it itself: it counts towards whether
    # the phase communicated, not towards the bytes moved.
    incoming = (
        comm.payload_bytes([previous.broadcast.tensors, previous.buffers])
        if previous
        else comm.payload_bytes([weights, round_input.buffers]) + round_input.opening_bytes
    )
    # The sums as they travel (transport.py: bfloat16 halves them); buffers go as they are.
    sums = transport.sent_bytes(total.tensor_sums, round_input.layout.transport)
    outgoing = sums + comm.payload_bytes(total.buffer_sums)
    return PhaseEnd(
        buffers=buffer_mean(total),
        broadcast=broadcast,
        metrics={**mean.metrics, **broadcast.metrics},
        comm_bytes=comm.phase_bytes(outgoing=outgoing, layout=round_input.layout),
        communicated=incoming + outgoing > 0,
        compute_by_worker=total.compute_by_worker,
        rows=total.rows,
        diagnostics=total.diagnostics,
    )


def update_round(
    round_input: RoundInput,
    weights: torch.Tensor,
    state: Any,
    ends: list[PhaseEnd],
    last: Partial,
) -> RoundResult:
    """The round's last task: finish the last phase, then the strategy's update.

    `ends` are the earlier phases, each finished once by finish_phase; `last` is the last
    phase's sum. The shards' states for the next round are not in it: each worker's stay
    with its output of the last phase (worker.py), the driver fetching them apart.
    """
    mean = mean_of(last)
    previous = ends[-1] if ends else None
    end = _phase_end(round_input, len(ends), mean, last, previous, weights, Broadcast(tensors={}))
    ends = [*ends, end]
    metrics = {name: value for e in ends for name, value in e.metrics.items()}
    update = round_input.strategy.update(
        RoundEnd(
            round_index=round_input.index,
            weights=weights,
            mean=mean,
            broadcasts=tuple(e.broadcast for e in ends[:-1]),
            metrics=dict(metrics),
            state=state,
            round_data=round_input.round_data,
        )
    )
    metrics.update(update.metrics)
    # The buffers of the last phase whose local steps moved them; else the round's own.
    moved = [e.buffers for e in ends if e.buffers]
    buffers = moved[-1] if moved else round_input.buffers
    compute: Counter[str] = Counter()
    diagnostics: dict[int, dict[str, float]] = {}
    for phase_end in ends:
        compute.update(phase_end.compute_by_worker)
        for shard, figures in phase_end.diagnostics.items():
            diagnostics.setdefault(shard, {}).update(figures)
    return RoundResult(
        weights=update.weights,
        state=update.state,
        metrics=metrics,
        comm_bytes=sum(e.comm_bytes for e in ends),
        # A phase a strategy skips (DANE's solve after a safeguard rejection) moves nothing.
        comm_phases=sum(1 for e in ends if e.communicated),
        compute_by_worker=dict(compute),
        rows=sum(e.rows for e in ends),
        diagnostics=diagnostics,
        buffers=buffers,
    )


def evaluate(
    spec: ModelSpec,
    shard: ShardData,
    weights: torch.Tensor,
    buffers: dict[str, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Loss and accuracy of `weights` (and buffers) on a (test) shard, in eval mode, and the
    seconds it took; with the validation rows the test split carries (shards.load_evaluation),
    theirs too, as val_loss and val_accuracy."""
    return combine_scores([(0, score_piece(spec, shard, weights, buffers))])
