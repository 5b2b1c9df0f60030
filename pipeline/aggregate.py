"""Averaging shard outputs: weighted sums that combine pairwise, in a fixed tree order.

The Dask graph and the single-process reference both reduce with `reduction_groups`, so they
add the same numbers in the same order and agree to the last bit for the same inputs.
Outputs are weighted by shard size: for equal shards this is the paper's plain mean_i, and for
uneven shards (dirichlet partitions) it keeps g equal to the gradient of the global loss.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from .algorithms.base import LocalOutput


@dataclass(frozen=True, kw_only=True)
class ShardReport:
    """One shard's output of one phase, with what the pipeline accounts for."""

    output: LocalOutput
    num_samples: int
    compute_s: float
    worker: str
    shard: int  # the shard's index, for its own diagnostics


@dataclass(frozen=True, kw_only=True)
class Partial:
    """A sum over some shards: sample-weighted sums of tensors and metrics, plus accounting."""

    tensor_sums: dict[str, torch.Tensor]
    metric_sums: dict[str, float]
    num_samples: int
    num_shards: int
    compute_by_worker: dict[str, float]
    rows: int  # rows read by the shards' work (LocalOutput.rows), summed
    # Each shard's LocalOutput.diagnostics by shard index: collected, never summed.
    diagnostics: dict[int, dict[str, float]]


def to_partial(report: ShardReport) -> Partial:
    n = report.num_samples
    return Partial(
        tensor_sums={k: t * n for k, t in report.output.tensors.items()},
        metric_sums={k: v * n for k, v in report.output.metrics.items()},
        num_samples=n,
        num_shards=1,
        compute_by_worker={report.worker: report.compute_s},
        rows=report.output.rows,
        diagnostics={report.shard: report.output.diagnostics} if report.output.diagnostics else {},
    )


def merge(a: Partial, b: Partial) -> Partial:
    compute = Counter(a.compute_by_worker)
    compute.update(b.compute_by_worker)
    return Partial(
        tensor_sums={k: a.tensor_sums[k] + b.tensor_sums[k] for k in a.tensor_sums},
        metric_sums={k: a.metric_sums[k] + b.metric_sums[k] for k in a.metric_sums},
        num_samples=a.num_samples + b.num_samples,
        num_shards=a.num_shards + b.num_shards,
        compute_by_worker=dict(compute),
        rows=a.rows + b.rows,
        diagnostics={**a.diagnostics, **b.diagnostics},
    )


def mean_of(partial: Partial) -> LocalOutput:
    n = partial.num_samples
    return LocalOutput(
        tensors={k: t / n for k, t in partial.tensor_sums.items()},
        metrics={k: v / n for k, v in partial.metric_sums.items()},
    )


def reduction_groups(count: int) -> list[tuple[int, ...]]:
    """Indices to combine at one tree level: (0, 1), (2, 3), ...; an odd last one alone."""
    return [tuple(range(i, min(i + 2, count))) for i in range(0, count, 2)]


def shard_placement(num_shards: int, workers: list[str]) -> list[str]:
    """The worker of each shard: contiguous blocks (shard i on worker i * W // m).

    Blocks, not round robin, so that the pairwise tree (which sums in shard order) adds each
    worker's shards on that worker, and partial sums cross between workers only W - 1 times
    when W divides m evenly in powers of two (comm.cross_worker_merges counts the general case).
    """
    return [workers[i * len(workers) // num_shards] for i in range(num_shards)]


def tree_reduce(parts: list[Partial]) -> Partial:
    """Reduce in the same pairwise order that the Dask graph uses."""
    while len(parts) > 1:
        parts = [
            merge(parts[g[0]], parts[g[1]]) if len(g) == 2 else parts[g[0]]
            for g in reduction_groups(len(parts))
        ]
    return parts[0]
