"""A phase's subtree sums as one flat tensor and a small header (`--collective torch`).

A Partial (aggregate.py) is a few numbers (samples, metric sums, accounting) and tensors the
size of the model. The group (exchange.py) sends the numbers as a pickled header and the
tensors as one flat tensor of one dtype, never pickled: each tensor of a Partial (its
tensor sums, then its floating buffers' sums, in name order) is a segment of it, each
segment starting on a 64-byte boundary (features.ALIGNMENT), so that a tensor rebuilt from
the flat one is a view that starts where torch's own allocations do (the update's
reductions then take the reference's bits, as wire.py explains for frames).

`merge` adds tensors elementwise, and IEEE addition of the same two numbers gives the same
bits in any grouping of elements: summing the flat tensors of the nodes, or any slice of
them (the reduce-scatter's chunks), in the tree's order gives the flat tensor of the tree's
sum, bit for bit. Counters (BatchNorm's num_batches_tracked, combined by maximum) stay in
the header.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ....datasets.rows.features import ALIGNMENT
from .aggregate import Partial, _is_counter


@dataclass(frozen=True)
class FlatLayout:
    """Where each tensor of a phase's Partials lies in their flat form (the same on every
    node of a phase: the same names and shapes)."""

    dtype: torch.dtype
    tensors: tuple[tuple[str, tuple[int, ...], int], ...]  # (name, shape, offset)
    buffers: tuple[tuple[str, tuple[int, ...], int], ...]  # floating buffers: the same
    size: int  # elements, the last segment padded to a boundary too

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


def _floating(partial: Partial) -> list[tuple[str, torch.Tensor]]:
    return [(k, b) for k, b in sorted(partial.buffer_sums.items()) if not _is_counter(b)]


def flat_layout(partial: Partial) -> FlatLayout | None:
    """The flat form of Partials like this one; None where its tensors do not share one
    floating dtype (they then travel as they are: exchange.py)."""
    named = [*sorted(partial.tensor_sums.items()), *_floating(partial)]
    dtypes = {t.dtype for _, t in named}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        return None
    dtype = dtypes.pop()
    step = max(ALIGNMENT // dtype.itemsize, 1)
    at, placed = 0, []
    for name, tensor in named:
        placed.append((name, tuple(tensor.shape), at))
        at += -(-tensor.numel() // step) * step
    split = len(partial.tensor_sums)
    return FlatLayout(dtype, tuple(placed[:split]), tuple(placed[split:]), at)


def header_of(partial: Partial) -> Partial:
    """The Partial without the tensors its flat form holds: what its header carries."""
    counters = {k: b for k, b in partial.buffer_sums.items() if _is_counter(b)}
    return replace(partial, tensor_sums={}, buffer_sums=counters)


def write_flat(partial: Partial, layout: FlatLayout, out: torch.Tensor) -> None:
    """The Partial's tensors copied into `out` (layout.size elements), padding zeroed."""
    tensors = partial.tensor_sums
    floating = dict(_floating(partial))
    entries = [*layout.tensors, *layout.buffers]
    ends = [at for _, _, at in entries[1:]] + [layout.size]
    for (name, shape, at), end in zip(entries, ends, strict=True):
        source = tensors[name] if name in tensors else floating[name]
        if tuple(source.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(source.shape)}, its phase's is {shape}")
        out[at : at + source.numel()].copy_(source.reshape(-1))
        out[at + source.numel() : end].zero_()  # the padding to the next boundary


def restored(header: Partial, layout: FlatLayout, flat: torch.Tensor) -> Partial:
    """The Partial of this header with its tensors as views of `flat`."""

    def view(name: str, shape: tuple[int, ...], at: int) -> torch.Tensor:
        count = 1
        for extent in shape:
            count *= extent
        return flat[at : at + count].view(shape)

    tensors = {name: view(name, shape, at) for name, shape, at in layout.tensors}
    buffers = {name: view(name, shape, at) for name, shape, at in layout.buffers}
    return replace(header, tensor_sums=tensors, buffer_sums={**header.buffer_sums, **buffers})


def chunk_bounds(size: int, world: int) -> list[tuple[int, int]]:
    """The reduce-scatter's chunk of each rank: contiguous, as even as the size allows."""
    return [(r * size // world, (r + 1) * size // world) for r in range(world)]
