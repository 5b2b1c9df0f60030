"""Local minibatches of a streamed shard (streamed.py): a shuffle buffer over its chunks.

It is a function of the round's generator and the step index alone, so the Dask run equals
the single-process reference and a shard reloaded on another worker gives the same weights.
"""

from __future__ import annotations

import torch

from .streamed import WINDOW_CHUNKS, StreamedRows


class ChunkWindow:
    """Local minibatches of one round on a streamed shard: a shuffle buffer over chunks.

    The round's generator permutes the shard's chunks once; a window of WINDOW_CHUNKS
    consecutive chunks of that order moves on by one chunk each time the steps have drawn as
    many rows as a chunk holds on average, and each minibatch is drawn uniformly, without
    replacement, from the rows of the chunks in the window. So a step reads at most one new
    chunk (read ahead by the prefetch thread), and an epoch's steps pass the window over
    every chunk. A shard of at most WINDOW_CHUNKS chunks is sampled as a resident one is:
    uniformly over all its rows. A larger one is sampled from a moving part of itself: rows
    of one chunk meet in minibatches more often than a uniform draw would pair them. That is
    harmless where a shard's rows are in mixed order (an iid partition writes them permuted:
    docs/results/memory.md measures it), not where the partition writes them class by class
    (dirichlet, label-skew), whose chunks hold a class or two each
    (docs/howto/larger-than-memory.md).
    """

    def __init__(self, rows: StreamedRows, rng: torch.Generator) -> None:
        self.rows = rows
        self.order = torch.randperm(rows.num_chunks, generator=rng).tolist()
        self.drawn = 0

    def window(self) -> list[int]:
        """The chunks the next minibatch is drawn from."""
        count = len(self.order)
        first = self.drawn * count // len(self.rows)
        return [self.order[(first + j) % count] for j in range(min(WINDOW_CHUNKS, count))]

    def sample(self, batch_size: int, rng: torch.Generator) -> torch.Tensor:
        """A minibatch of distinct row positions from the window's chunks."""
        chunks = self.window()
        candidates = torch.cat([self.rows.chunk_positions(c) for c in chunks])
        size = min(batch_size, len(candidates))
        picked = candidates[torch.randperm(len(candidates), generator=rng)[:size]]
        self.drawn += size
        if len(self.order) > WINDOW_CHUNKS:  # the chunk the window takes in next
            first = self.order.index(chunks[0])
            self.rows.prefetch(self.order[(first + WINDOW_CHUNKS) % len(self.order)])
        return picked
