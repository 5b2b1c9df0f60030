"""The only functions that run on workers: pure, module level, no globals.

Each takes plain data (tensors, frozen dataclasses) and returns plain data, so the same
functions serve the Dask graph (graph.py) and the single-process reference (reference.py).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..datasets.store import read_shard
from ..models.registry import ModelSpec, build_model
from .aggregate import (
    Partial,
    ShardReport,
    mean_of,
    merge,
    tensor_bytes,
    tree_reduce,
)
from .aggregate import to_partial as _to_partial
from .algorithms.base import LocalOutput, Strategy, Tensors
from .objective import ShardObjective
from .sizes import register_dataclasses


@dataclass(frozen=True, kw_only=True)
class ShardData:
    """A shard's rows as tensors, normalised and in the run's dtype; lives on one worker."""

    index: int
    x: torch.Tensor
    y: torch.Tensor
    task: str


@dataclass(frozen=True, kw_only=True)
class PhaseEnd:
    """The averaged outcome of one phase: what goes out next, and its communication cost."""

    mean: LocalOutput
    sent: LocalOutput  # tensors for the next phase + metrics such as grad_norm
    comm_bytes: int
    # Whether the phase sent or gathered tensors at all: a communication round of the
    # algorithm, whatever the layout (on one worker DANE's solve phase moves no bytes).
    communicated: bool = True


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """Everything the driver keeps from a round."""

    weights: torch.Tensor
    state: Tensors
    metrics: dict[str, float] = field(default_factory=dict)
    compute_by_worker: dict[str, float] = field(default_factory=dict)
    shard_states: list[Tensors] | None = None  # per-shard state for the next round, if any


register_dataclasses(ShardData, PhaseEnd, RoundResult)


def worker_id() -> str:
    """This process's identity; on a worker it names the worker in the round's metrics."""
    return f"{socket.gethostname()}:{os.getpid()}"


def shard_seed(seed: int, round_index: int, shard_index: int) -> int:
    """Independent, reproducible RNG streams per (run seed, round, shard)."""
    return int(np.random.SeedSequence([seed, round_index, shard_index]).generate_state(1)[0])


def load_shard(
    store: str,
    *,
    split: str,
    start: int,
    stop: int,
    index: int,
    task: str,
    normalization: dict,
    dtype: str,
    num_classes: int | None = None,
    device: str = "cpu",
) -> ShardData:
    """Read rows [start, stop) of a split from zarr, check, normalise, convert to tensors.

    The tensors go to `device` (config.device: auto = this worker's GPU if it has one) and
    stay there: every round's work on the shard runs where its rows are.

    A damaged chunk, labels outside [0, num_classes) or non-finite values raise ValueError
    naming the shard (datasets/store.py read_shard); the driver reports it as one line.
    """
    x, y = read_shard(store, split, start, stop, index=index, task=task, num_classes=num_classes)
    torch_dtype = getattr(torch, dtype)
    where = resolve_device(device)
    features = torch.from_numpy(np.ascontiguousarray(x)).to(where).to(torch_dtype)
    del x  # the raw rows (uint8 for images) are not needed past the conversion
    if features.ndim in (3, 4):  # signals / images: per-channel normalisation from the store
        shape = (1, -1, *[1] * (features.ndim - 2))
        mean = torch.tensor(normalization["mean"], dtype=torch_dtype, device=where).view(shape)
        std = torch.tensor(normalization["std"], dtype=torch_dtype, device=where).view(shape)
        # In place: a second shard-sized copy would double the worker's peak memory.
        features.sub_(mean).div_(std)
    targets = torch.from_numpy(np.ascontiguousarray(y)).to(where)
    targets = targets.long() if task == "classification" else targets.to(torch_dtype)
    return ShardData(index=index, x=features, y=targets, task=task)


def resolve_device(name: str) -> torch.device:
    """config.device on this process: auto is the current GPU if torch sees one, else CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"--device cuda, but the worker on {socket.gethostname()} sees no GPU; use "
            "--device cpu or auto"
        )
    return torch.device(name)


def _to(tensors: Tensors, device: torch.device) -> Tensors:
    return {k: v.to(device) for k, v in tensors.items()}


def _output_to(output: LocalOutput, device: torch.device) -> LocalOutput:
    return LocalOutput(
        tensors=_to(output.tensors, device),
        metrics=output.metrics,
        shard_state=_to(output.shard_state, device),
    )


def make_objective(spec: ModelSpec, shard: ShardData) -> ShardObjective:
    return ShardObjective(_architecture(spec), shard.x, shard.y, shard.task, l2=spec.l2)


_MODELS = threading.local()


def _architecture(spec: ModelSpec) -> torch.nn.Module:
    """The model's module for `spec`, built once per thread.

    It only supplies the architecture: weights come from the flat vector through
    functional_call, so it lives on the meta device at no memory cost. functional_call swaps
    the module's parameters while it runs, hence one module per thread, never shared.
    """
    cache = _MODELS.__dict__.setdefault("by_spec", {})
    if spec not in cache:
        with torch.device("meta"):
            cache[spec] = build_model(spec)
    return cache[spec]


def run_local(
    strategy: Strategy,
    phase: int,
    spec: ModelSpec,
    shard: ShardData,
    weights: torch.Tensor,
    received: Tensors,
    previous: ShardReport | None,
    shard_state: Tensors | None = None,
    *,
    seed: int,
    round_index: int,
) -> ShardReport:
    """One shard's work in one phase of one round (`shard_state`: see algorithms/base.py)."""
    started = time.perf_counter()
    rng = torch.Generator().manual_seed(shard_seed(seed, round_index, shard.index))
    # Inputs arrive on the CPU (that is what travels); the work runs where the shard is, and
    # the output goes back to the CPU for the reduction. On a CPU worker these are no-ops.
    device = shard.x.device
    output = strategy.local(
        phase,
        make_objective(spec, shard),
        weights.to(device),
        _to(received, device),
        _output_to(previous.output, device) if previous else None,
        rng,
        _to(shard_state or {}, device),
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # so that compute_s is the work, not its launch
    return ShardReport(
        output=_output_to(output, torch.device("cpu")),
        num_samples=int(shard.x.shape[0]),
        compute_s=time.perf_counter() - started,
        worker=worker_id(),
    )


def combine(*parts: ShardReport | Partial) -> Partial:
    """Sum shard reports (or partial sums) in argument order."""
    partials = [_to_partial(p) if isinstance(p, ShardReport) else p for p in parts]
    total = partials[0]
    for part in partials[1:]:
        total = merge(total, part)
    return total


def combine_tree(*reports: ShardReport) -> Partial:
    """Sum consecutive shards' reports in the pairwise tree order (aggregate.tree_reduce)."""
    return tree_reduce([_to_partial(r) for r in reports])


def phase_broadcast(
    strategy: Strategy, phase: int, weights: torch.Tensor, total: Partial
) -> Tensors:
    """What the next phase receives: the strategy's broadcast of the phase's mean."""
    return strategy.broadcast(phase, weights, mean_of(total)).tensors


def finish_phase(
    strategy: Strategy,
    phase: int,
    weights: torch.Tensor,
    total: Partial,
    previous: PhaseEnd | None,
    inputs_moved: int,
    partials_moved: int,
) -> PhaseEnd:
    """Average a phase and count the bytes it moved between processes.

    `inputs_moved`: copies of the phase's input that travelled to the workers holding shards
    (the weights in phase 0: one from the driver to the reducing worker, one to each other
    worker; a later phase's broadcast: one to each worker but the reducing one, which made
    it). `partials_moved`: partial sums that crossed between workers in the reduction tree
    (aggregate.cross_worker_merges). graph.py places the tasks so that these are the only
    transfers; the scaling benchmark checks this against Dask's own transfer logs.
    """
    incoming = (
        tensor_bytes(previous.sent.tensors)
        if previous
        else weights.numel() * weights.element_size()
    )
    mean = mean_of(total)
    is_last = phase == len(strategy.phases) - 1
    sent = LocalOutput(tensors={}) if is_last else strategy.broadcast(phase, weights, mean)
    outgoing = tensor_bytes(total.tensor_sums)
    comm = incoming * inputs_moved + outgoing * partials_moved
    return PhaseEnd(mean=mean, sent=sent, comm_bytes=comm, communicated=incoming + outgoing > 0)


def finish_round(
    strategy: Strategy,
    weights: torch.Tensor,
    state: Tensors,
    totals: list[Partial],
    ends: list[PhaseEnd],
    shard_states: list[Tensors] | None = None,
) -> RoundResult:
    """New weights and the round's metrics from every phase's outcome.

    `shard_states` (strategies with per-shard state only) is each shard's state for the next
    round, as its last phase returned it; it is passed through untouched.
    """
    update = strategy.update(weights, ends[-1].mean, state)
    compute: dict[str, float] = {}
    for total in totals:
        for worker, seconds in total.compute_by_worker.items():
            compute[worker] = compute.get(worker, 0.0) + seconds
    metrics: dict[str, float] = {}
    for end in ends:
        metrics.update(end.mean.metrics)
        metrics.update(end.sent.metrics)
    metrics.update(update.metrics)
    metrics["comm_bytes"] = float(sum(end.comm_bytes for end in ends))
    # Communication rounds are the phases that moved tensors (a phase a strategy skips, such
    # as DANE's solve after a safeguard rejection, sends and gathers nothing).
    metrics["comm_phases"] = float(sum(1 for end in ends if end.communicated))
    metrics["max_worker_compute_s"] = max(compute.values())
    return RoundResult(
        weights=update.weights,
        state=update.state,
        metrics=metrics,
        compute_by_worker=compute,
        shard_states=shard_states,
    )


def inputs_moved(phase: int, receivers: int) -> int:
    """Copies of a phase's input that reach the `receivers` workers holding shards.

    Phase 0's input is the weights: the driver sends one copy to the reducing worker, which
    sends one to each other worker. A later phase's broadcast is made on the reducing worker,
    so every other worker receives one copy.
    """
    return receivers if phase == 0 else receivers - 1


def update_round(
    strategy: Strategy,
    weights: torch.Tensor,
    state: Tensors,
    totals: list[Partial],
    receivers: int,
    partials_moved: int,
    shard_states: list[Tensors] | None = None,
) -> RoundResult:
    """finish_phase for every phase in order, then finish_round: the round's last task.

    reference.py calls the two steps itself (it needs each phase's broadcast as it goes); the
    result is the same.
    """
    ends: list[PhaseEnd] = []
    for phase, total in enumerate(totals):
        previous = ends[-1] if ends else None
        moved = inputs_moved(phase, receivers)
        ends.append(finish_phase(strategy, phase, weights, total, previous, moved, partials_moved))
    return finish_round(strategy, weights, state, totals, ends, shard_states)


def round_weights(result: RoundResult) -> torch.Tensor:
    return result.weights


def round_state(result: RoundResult) -> Tensors:
    return result.state


def shard_state_of(report: ShardReport) -> Tensors:
    """A shard's state for the next round, from its last phase's report."""
    return report.output.shard_state


def evaluate(spec: ModelSpec, shard: ShardData, weights: torch.Tensor) -> dict[str, float]:
    """Loss and accuracy of `weights` on a (test) shard, and the seconds it took."""
    started = time.perf_counter()
    metrics = make_objective(spec, shard).evaluate(weights.to(shard.x.device))
    return {**metrics, "eval_s": time.perf_counter() - started}
