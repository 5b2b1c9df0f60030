"""A shard streamed from its store (`--shard-memory stream`): features read a stored chunk at a
time as the rounds need them, for shards that do not fit in a worker's memory.

StreamedRows has StoredRows' interface (features.py), so ShardObjective reads it as it reads
a resident shard: full passes (DANE's gradient, evaluation, line searches) take slices in
order, and each chunk is read once per pass, the next one read by a prefetch thread while
this one is computed on. It holds a small LRU cache of decoded chunks, in their stored dtype,
and converts per slice exactly as StoredRows does, so every slice equals the resident one.
It pickles as its recipe (store, split, rows, normalisation), never its cache: a shard
reloaded on another worker after a fault reads the same rows.

Local minibatches cannot be drawn from the whole shard without reading all of it every step:
ChunkWindow (below) draws them from a shuffle buffer over chunks instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from ..store.stream import ChunkReader
from .features import FeatureRows, Rows, StoredRows

# Chunks a minibatch is drawn from (ChunkWindow's shuffle buffer), and the chunks kept decoded:
# the window, the one the prefetch thread reads ahead, and one a full pass is on.
WINDOW_CHUNKS = 4
CACHE_CHUNKS = WINDOW_CHUNKS + 2
# A split that is only ever read in order, in full passes (the test split, the validation
# rows): the chunk a pass is on and the one the prefetch thread reads ahead.
PASS_CACHE_CHUNKS = 2
# Fixed samples kept as read: the solve diagnostics' rows and a --grad-sample, the same rows
# every round (drawn from the strategy's seed), scattered over every chunk of the shard.
KEPT_SAMPLES = 2


class StreamedRows(FeatureRows):
    """Rows `rows` (sorted indices into the split) of a store's features, read chunk by chunk.

    `reader`: the split's features (datasets/store/stream.py); `dtype`, `mean`, `std`: as
    StoredRows'. The rows may be a range [start, stop) or any kept subset of it.
    """

    def __init__(
        self,
        reader: ChunkReader,
        rows: np.ndarray,
        *,
        dtype: torch.dtype,
        mean: torch.Tensor | None,
        std: torch.Tensor | None,
        device: torch.device,
        cache_chunks: int = CACHE_CHUNKS,
    ) -> None:
        self.reader, self.rows = reader, np.asarray(rows, dtype=np.int64)
        self.cache_chunks = cache_chunks
        self.dtype, self.mean, self.std, self.device = dtype, mean, std, torch.device(device)
        array = reader.array
        self._sample_shape = tuple(array.shape[1:])
        self._stored_dtype = torch.from_numpy(np.empty(0, dtype=array.dtype)).dtype
        # Row positions where a stored chunk begins: chunk i holds rows bounds[i]:bounds[i+1].
        chunk_of = self.rows // reader.chunk_rows
        starts = np.flatnonzero(np.diff(chunk_of)) + 1
        self.bounds = np.concatenate([[0], starts, [len(self.rows)]]).astype(np.int64)
        self._cache: OrderedDict[int, Future] = OrderedDict()
        self._samples: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    # What the objective reads of its features, as for StoredRows.
    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.rows), *self._sample_shape))

    @property
    def num_chunks(self) -> int:
        return len(self.bounds) - 1

    @property
    def nbytes(self) -> int:
        """Bytes held: the decoded chunks in the cache (and the row indices), not the shard."""
        with self._lock:
            held = [f.result() for f in self._cache.values() if f.done() and not f.exception()]
            held += list(self._samples.values())
        return self.rows.nbytes + sum(t.element_size() * t.nelement() for t in held)

    @property
    def stored_dtype(self) -> torch.dtype:
        return self._stored_dtype

    def _stored(self, rows: slice | torch.Tensor) -> torch.Tensor:
        """The given rows, gathered from the chunks: a new tensor, never a cache view."""
        return self._gather(self._positions(rows))

    def read_all(self) -> torch.Tensor:
        """Every row in its stored dtype, read a chunk at a time (a fresh tensor, not kept)."""
        return self._gather(np.arange(len(self), dtype=np.int64))

    def take(self, rows: Rows) -> StoredRows | StreamedRows:
        """A range of rows stays streamed (a half-shard, correction.py); picked rows (a fixed
        sample) are read once and held, in their stored dtype."""
        if isinstance(rows, slice):
            return self._with(self.rows[rows], self.device)
        return StoredRows(self._sample(self._positions(rows)), self.dtype, self.mean, self.std)

    def _sample(self, positions: np.ndarray) -> torch.Tensor:
        """The rows at `positions`, read once for the last KEPT_SAMPLES position lists asked
        for: a fixed sample touches every chunk, so reading it again each round would cost
        the I/O of a full pass (281 chunk reads a shard on a 4.2 GB store, issue 36)."""
        key = np.ascontiguousarray(positions).tobytes()
        with self._lock:
            picked = self._samples.get(key)
        if picked is None:
            picked = self._gather(positions)
            with self._lock:
                self._samples[key] = picked
                while len(self._samples) > KEPT_SAMPLES:
                    self._samples.popitem(last=False)
        return picked

    def to(self, device: torch.device | str) -> StreamedRows:
        return self._with(self.rows, torch.device(device))

    def _with(self, rows: np.ndarray, device: torch.device) -> StreamedRows:
        moved = self._normalizer_on(device)
        return StreamedRows(
            self.reader, rows, dtype=self.dtype, mean=moved[0], std=moved[1], device=device,
            cache_chunks=self.cache_chunks,
        )  # fmt: skip

    def release(self) -> None:
        """Drop the decoded chunks and kept samples: a split scored now and then holds nothing
        between its passes (each pass reads every chunk again anyway)."""
        with self._lock:
            self._cache.clear()
            self._samples.clear()

    @staticmethod
    def join(parts: list[StreamedRows]) -> StreamedRows:
        """Rows of one split streamed by several parts (every shard's validation rows), as
        one StreamedRows, still streamed; the parts' rows must follow each other in order."""
        rows = np.concatenate([p.rows for p in parts])
        if np.any(np.diff(rows) <= 0):
            raise ValueError("streamed parts join only in the order of their rows")
        return parts[0]._with(rows, parts[0].device)

    def chunk_positions(self, chunk: int) -> torch.Tensor:
        """The row positions chunk `chunk` holds (what a minibatch draws from)."""
        return torch.arange(int(self.bounds[chunk]), int(self.bounds[chunk + 1]))

    def prefetch(self, chunk: int) -> None:
        """Start reading `chunk` in the background, if it is not held or on its way."""
        if 0 <= chunk < self.num_chunks:
            self._future(chunk, background=True)

    def _positions(self, rows: Rows) -> np.ndarray:
        if isinstance(rows, slice):
            return np.arange(*rows.indices(len(self)), dtype=np.int64)
        index = torch.as_tensor(rows)
        if index.dtype == torch.bool:
            index = index.nonzero().flatten()
        positions = index.cpu().numpy().astype(np.int64).reshape(-1)
        positions = np.where(positions < 0, positions + len(self), positions)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(self)):
            raise IndexError(f"row index out of range for a shard of {len(self)} rows")
        return positions

    def _gather(self, positions: np.ndarray) -> torch.Tensor:
        """The rows at `positions`, in their stored dtype, in that order (a fresh tensor)."""
        chunks = np.searchsorted(self.bounds, positions, side="right") - 1
        needed = [int(c) for c in np.unique(chunks)]
        shape = (len(positions), *self._sample_shape)
        out = torch.empty(shape, dtype=self._stored_dtype, device=self.device)
        # One chunk held at a time beyond the cache: rows scattered over the whole shard (a
        # fixed sample) would otherwise hold every chunk they touch until the last is copied,
        # the shard's whole size (issue 36: 1.1 GiB on a 1 GiB worker). The next chunk is read
        # on the prefetch thread while this one is read and copied; after the last, the chunk
        # that follows it, which a pass in order wants next.
        for k, chunk in enumerate(needed):
            self.prefetch(needed[k + 1] if k + 1 < len(needed) else chunk + 1)
            mask = chunks == chunk
            within = torch.from_numpy(positions[mask] - self.bounds[chunk]).to(self.device)
            out[torch.from_numpy(mask).to(self.device)] = self._future(chunk).result()[within]
        return out

    def _future(self, chunk: int, *, background: bool = False) -> Future:
        with self._lock:
            future, fresh = self._cache.get(chunk), False
            if future is None:
                # In the background on the prefetch thread; else here and now, never queued
                # behind a prefetch of another chunk.
                fresh = not background
                future = Future() if fresh else self._executor().submit(self._read, chunk)
                self._cache[chunk] = future
                while len(self._cache) > self.cache_chunks:  # least recently used first
                    self._cache.popitem(last=False)
            self._cache.move_to_end(chunk)
        if fresh:
            try:
                future.set_result(self._read(chunk))
            except Exception as err:  # a damaged chunk: raised to whoever waits on it
                future.set_exception(err)
        return future

    def _read(self, chunk: int) -> torch.Tensor:
        rows = self.rows[self.bounds[chunk] : self.bounds[chunk + 1]]
        low, high = int(rows[0]), int(rows[-1]) + 1
        x = self.reader.read(low, high)
        if len(rows) != high - low:  # kept rows only (a split that excludes some)
            x = x[rows - low]
        return torch.from_numpy(np.ascontiguousarray(x)).to(self.device)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dane-prefetch")
        return self._pool

    def __getstate__(self) -> dict:
        """The recipe: store, split, rows and normalisation; never the cache or the thread."""
        keep = ("reader", "dtype", "mean", "std", "device", "cache_chunks")
        state = {name: getattr(self, name) for name in keep}
        contiguous = len(self.rows) and self.rows[-1] - self.rows[0] + 1 == len(self.rows)
        state["rows"] = (int(self.rows[0]), int(self.rows[-1]) + 1) if contiguous else self.rows
        return state

    def __setstate__(self, state: dict) -> None:
        rows = state.pop("rows")
        rows = np.arange(*rows) if isinstance(rows, tuple) else rows  # a range travels as one
        self.__init__(state.pop("reader"), rows, **state)  # type: ignore[misc]


# Local minibatches of a streamed shard. A function of the round's generator and the step index
# alone, so the Dask run equals the single-process reference and a shard reloaded on another
# worker gives the same weights.
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
    docs/results/memory/streamed.md measures it), not where the partition writes them class by class
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
