"""Averaging shard outputs: weighted sums that combine pairwise, in a fixed tree order.

The Dask graph and the single-process reference both reduce in the pairwise tree of `node_sum`,
so they add the same numbers in the same order and agree to the last bit for the same inputs.
Outputs are weighted by shard size: for equal shards this is the paper's plain mean_i, and for
uneven shards (dirichlet partitions) it keeps g equal to the gradient of the global loss.

A model's buffers are combined as FedAvg does: floating ones (BatchNorm's running mean and
variance) by the same row-weighted mean, counters (`num_batches_tracked`) by the maximum,
since every shard counted its own steps from the same start and a mean of counts is no count.
The alternative, FedBN (Li et al. 2021), keeps the statistics per shard; we combine them so
that the one model handed back evaluates anywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..protocol import LocalOutput


@dataclass(frozen=True, kw_only=True)
class Partial:
    """A sum over some shards: sample-weighted sums of tensors and metrics, plus accounting.

    A leaf, one shard's sum of one phase (`shard_leaf`), also holds that shard's own output:
    its worker keeps the leaf for the shard's next phase (LocalContext.previous, its state).
    Sums of two or more shards hold none, and a leaf travels without it (`sendable`).
    """

    tensor_sums: dict[str, torch.Tensor]
    metric_sums: dict[str, float]
    num_samples: int
    num_shards: int
    compute_by_worker: dict[str, float]
    rows: int  # rows read by the shards' work (LocalOutput.rows), summed
    # Each shard's LocalOutput.diagnostics by shard index: collected, never summed.
    diagnostics: dict[int, dict[str, float]]
    # Buffers: floating ones as sample-weighted sums, counters as their maximum ({}: none).
    buffer_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    output: LocalOutput | None = None  # a leaf's shard's own output; None in every sum


def _is_counter(tensor: torch.Tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex())


def shard_leaf(
    *,
    output: LocalOutput,
    num_samples: int,
    compute_s: float,
    worker: str,
    shard: int,
    buffers: dict[str, torch.Tensor] | None = None,
) -> Partial:
    """One shard's output of one phase as the leaf of the pairwise sums: weighted by its
    `num_samples` rows, with what the pipeline accounts for (its seconds on `worker`, its
    buffers after the phase's local steps: {} where none moved them)."""
    n = num_samples
    buffers = {k: b if _is_counter(b) else b * n for k, b in (buffers or {}).items()}
    return Partial(
        buffer_sums=buffers,
        tensor_sums={k: t * n for k, t in output.tensors.items()},
        metric_sums={k: v * n for k, v in output.metrics.items()},
        num_samples=n,
        num_shards=1,
        compute_by_worker={worker: compute_s},
        rows=output.rows,
        diagnostics={shard: output.diagnostics} if output.diagnostics else {},
        output=output,
    )


def sendable(partial: Partial) -> Partial:
    """The sum as it travels: a leaf without its shard's own output (shard_leaf)."""
    return partial if partial.output is None else replace(partial, output=None)


def merge(a: Partial, b: Partial) -> Partial:
    compute = Counter(a.compute_by_worker)
    compute.update(b.compute_by_worker)
    assert a.buffer_sums.keys() == b.buffer_sums.keys(), "shards moved different buffers"
    buffers = {
        k: torch.maximum(t, b.buffer_sums[k]) if _is_counter(t) else t + b.buffer_sums[k]
        for k, t in a.buffer_sums.items()
    }
    return Partial(
        buffer_sums=buffers,
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
        rows=partial.rows,  # a sum, as in a shard's own output: the rows all shards read
    )


def buffer_mean(partial: Partial) -> dict[str, torch.Tensor]:
    """The combined buffers of a sum ({} if no shard moved its buffers in that phase)."""
    n = partial.num_samples
    return {k: t if _is_counter(t) else t / n for k, t in partial.buffer_sums.items()}


def shard_placement(num_shards: int, workers: list[str]) -> list[str]:
    """The worker of each shard: contiguous blocks (shard i on worker i * W // m).

    Blocks, not round robin, so that the pairwise tree (which sums in shard order) adds each
    worker's shards on that worker, and partial sums cross between workers only W - 1 times
    when W divides m evenly in powers of two (comm.cross_worker_merges counts the general case).
    """
    return [workers[i * len(workers) // num_shards] for i in range(num_shards)]


# The pairwise tree as nodes: node (level, j) sums leaves [j * 2^level, (j + 1) * 2^level),
# clipped to the shard count; a level's odd last node passes its only child through, so a
# level pairs (0, 1), (2, 3), ... and leaves an odd last one alone. The all-gather round
# (worker.py) sums each worker's whole subtrees where they live and completes the tree
# from those nodes on every worker: the same additions in the same order as tree_reduce over
# all the leaves, so the result is the same to the last bit for any placement.
TreeNode = tuple[int, int]


def tree_levels(count: int) -> int:
    """The root's level: the number of pairwise levels above `count` leaves (each level
    halves the width, rounding up: ceil(log2(count)))."""
    return max(count - 1, 0).bit_length()


def owned_nodes(placement: list[str], worker: str) -> list[TreeNode]:
    """The largest subtrees whose leaves (shards) all live on `worker`, in shard order."""
    count, top = len(placement), tree_levels(len(placement))

    def on_worker(level: int, j: int) -> bool:
        return all(w == worker for w in placement[j << level : (j + 1) << level])

    found: list[TreeNode] = []

    def visit(level: int, j: int) -> None:
        if on_worker(level, j):
            found.append((level, j))
        elif level > 0:
            for child in (2 * j, 2 * j + 1):
                if child << (level - 1) < count:
                    visit(level - 1, child)

    visit(top, 0)
    return found


def node_sum(
    node: TreeNode,
    known: dict[TreeNode, Any],
    count: int,
    combine: Callable[[Any, Any], Any] = merge,
) -> Any:
    """The sum of a node's leaves from the nodes already summed (`known`), pairwise, in
    the tree's order: a known node is taken as it is, others combine their two children
    (`merge` for Partials; the reduce-scatter sums chunks of tensors the same way)."""
    if node in known:
        return known[node]
    level, j = node
    assert level > 0, f"leaf {j} is in no known node"
    left, right = (level - 1, 2 * j), (level - 1, 2 * j + 1)
    if right[1] << (level - 1) >= count:  # the odd last node of its level: passed through
        return node_sum(left, known, count, combine)
    return combine(node_sum(left, known, count, combine), node_sum(right, known, count, combine))


def tree_root(count: int) -> TreeNode:
    return (tree_levels(count), 0)


def tree_reduce(parts: list[Partial]) -> Partial:
    """Reduce in the same pairwise order that the Dask graph uses: the tree over the leaves."""
    count = len(parts)
    return node_sum(tree_root(count), {(0, i): part for i, part in enumerate(parts)}, count)
