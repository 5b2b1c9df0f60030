"""The only functions that run on workers: pure, module level, no globals.

Each takes plain data (tensors, frozen dataclasses) and returns plain data, so the same
functions serve the Dask graph (graph.py) and the single-process reference (reference.py).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from dask_dane.datasets.store import read_shard
from dask_dane.models.registry import ModelSpec, build_model
from dask_dane.pipeline.aggregate import Partial, ShardReport, mean_of, merge, tensor_bytes
from dask_dane.pipeline.aggregate import to_partial as _to_partial
from dask_dane.pipeline.algorithms.base import LocalOutput, Strategy, Tensors
from dask_dane.pipeline.objective import ShardObjective


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


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """Everything the driver keeps from a round."""

    weights: torch.Tensor
    state: Tensors
    metrics: dict[str, float] = field(default_factory=dict)
    compute_by_worker: dict[str, float] = field(default_factory=dict)
    shard_states: list[Tensors] | None = None  # per-shard state for the next round, if any


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
) -> ShardData:
    """Read rows [start, stop) of a split from zarr, check, normalise, convert to tensors.

    A damaged chunk, labels outside [0, num_classes) or non-finite values raise ValueError
    naming the shard (datasets/store.py read_shard); the driver reports it as one line.
    """
    x, y = read_shard(store, split, start, stop, index=index, task=task, num_classes=num_classes)
    torch_dtype = getattr(torch, dtype)
    features = torch.from_numpy(np.ascontiguousarray(x)).to(torch_dtype)
    if features.ndim in (3, 4):  # signals / images: per-channel normalisation from the store
        shape = (1, -1, *[1] * (features.ndim - 2))
        mean = torch.tensor(normalization["mean"], dtype=torch_dtype).view(shape)
        std = torch.tensor(normalization["std"], dtype=torch_dtype).view(shape)
        features = (features - mean) / std
    targets = torch.from_numpy(np.ascontiguousarray(y))
    targets = targets.long() if task == "classification" else targets.to(torch_dtype)
    return ShardData(index=index, x=features, y=targets, task=task)


def make_objective(spec: ModelSpec, shard: ShardData) -> ShardObjective:
    # The module only supplies the architecture: weights come from the flat vector through
    # functional_call, so it is built on the meta device at no cost.
    with torch.device("meta"):
        model = build_model(spec)
    return ShardObjective(model, shard.x, shard.y, shard.task, l2=spec.l2)


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
    output = strategy.local(
        phase,
        make_objective(spec, shard),
        weights,
        received,
        previous.output if previous else None,
        rng,
        shard_state or {},
    )
    return ShardReport(
        output=output,
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


def finish_phase(
    strategy: Strategy,
    phase: int,
    weights: torch.Tensor,
    total: Partial,
    previous: PhaseEnd | None,
    num_receivers: int,
) -> PhaseEnd:
    """Average a phase and count what it moved.

    Every worker holding shards received the phase's input once (the weights in phase 0, the
    previous phase's broadcast after that), and every shard sent its output tensors back.
    """
    incoming = (
        tensor_bytes(previous.sent.tensors)
        if previous
        else weights.numel() * weights.element_size()
    )
    mean = mean_of(total)
    is_last = phase == len(strategy.phases) - 1
    sent = LocalOutput(tensors={}) if is_last else strategy.broadcast(phase, weights, mean)
    comm = incoming * num_receivers + total.gathered_bytes
    return PhaseEnd(mean=mean, sent=sent, comm_bytes=comm)


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
    metrics["comm_phases"] = float(sum(1 for end in ends if end.comm_bytes > 0))
    metrics["max_worker_compute_s"] = max(compute.values())
    return RoundResult(
        weights=update.weights,
        state=update.state,
        metrics=metrics,
        compute_by_worker=compute,
        shard_states=shard_states,
    )


def round_weights(result: RoundResult) -> torch.Tensor:
    return result.weights


def round_state(result: RoundResult) -> Tensors:
    return result.state


def shard_state_of(report: ShardReport) -> Tensors:
    """A shard's state for the next round, from its last phase's report."""
    return report.output.shard_state


def sent_tensors(end: PhaseEnd) -> Tensors:
    """Only the tensors the next phase needs travel to the shards, not the whole PhaseEnd."""
    return end.sent.tensors


def evaluate(spec: ModelSpec, shard: ShardData, weights: torch.Tensor) -> dict[str, float]:
    """Loss and accuracy of `weights` on a (test) shard."""
    return make_objective(spec, shard).evaluate(weights)
