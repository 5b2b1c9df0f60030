"""Sample arrays read on demand, so that a store is written without the whole data set in memory.

A source that produces its rows in blocks returns LazyRows for x instead of an array: a map
from row positions to a reader (a scratch file of rows here; image files in images.py).
write_store reads them an output chunk at a time (store/write.py), so its peak memory is a
few chunks, not the data set. LazyRows answers what the writer and the checks ask of an
array: shape, dtype, len, and rows by slice or integer array, returned as NumPy arrays.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

BLOCK_BYTES = 4 * 2**20  # rows a source generates, or a check reads, at a time

Reader = Callable[[np.ndarray], np.ndarray]


def block_rows(sample_shape: tuple[int, ...], itemsize: int) -> int:
    """Rows of `sample_shape` and `itemsize` that fill about BLOCK_BYTES (at least one)."""
    row_bytes = int(np.prod(sample_shape, dtype=np.int64)) * itemsize
    return max(1, BLOCK_BYTES // max(row_bytes, 1))


class LazyRows:
    """Rows `rows` (positions in a reader's numbering) of samples `sample_shape` and `dtype`."""

    def __init__(
        self, read: Reader, rows: np.ndarray, sample_shape: tuple[int, ...], dtype: Any
    ) -> None:
        self._read = read
        self._rows = np.asarray(rows, dtype=np.int64)
        self.dtype = np.dtype(dtype)
        self.shape = (len(self._rows), *sample_shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        """The rows `key` selects (a slice, an integer array or a mask), read now; a tuple
        selects rows with its first item and indexes them with the rest, as NumPy does."""
        if isinstance(key, tuple):
            first, rest = (key[0], key[1:]) if key else (slice(None), ())
            if first is Ellipsis:
                return self[:][key]
            picked = self[first]
            return picked[(slice(None), *rest)] if np.ndim(self._rows[first]) else picked[rest]
        rows = self._rows[key]
        if np.ndim(rows) == 0:
            return self._read(np.array([rows]))[0]
        return self._read(rows)

    def subset(self, key: Any) -> LazyRows:
        """The rows `key` selects, still unread."""
        return LazyRows(self._read, self._rows[key], self.shape[1:], self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        # Everything at once: for callers that want the data itself (tests, notebooks).
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


def take_rows(x: np.ndarray | LazyRows, key: Any) -> np.ndarray | LazyRows:
    """x[key] for an array; for LazyRows the same rows, left unread."""
    return x.subset(key) if isinstance(x, LazyRows) else x[key]


class ScratchRows:
    """Rows appended in order to an unnamed temporary file, read back by position.

    For a source that can only generate its rows in sequence (a seeded generator): the
    partition's permutation then gathers them from here one output chunk at a time. The file
    goes when this object does; its pages sit in the OS cache, not in the process's memory.
    """

    def __init__(self, sample_shape: tuple[int, ...], dtype: Any) -> None:
        # Open as long as the rows are wanted; closed (and gone) when this object is.
        self._file = tempfile.TemporaryFile(prefix="dane-prepare-")  # noqa: SIM115
        self._shape = tuple(sample_shape)
        self._dtype = np.dtype(dtype)
        self._row_bytes = int(np.prod(self._shape, dtype=np.int64)) * self._dtype.itemsize
        self._count = 0

    def append(self, block: np.ndarray) -> None:
        """Write `block` (rows of the sample shape) after the rows already written."""
        if block.shape[1:] != self._shape:
            raise ValueError(f"scratch rows are {self._shape}, not {block.shape[1:]}")
        self._file.write(np.ascontiguousarray(block, dtype=self._dtype).tobytes())
        self._count += len(block)

    def rows(self) -> LazyRows:
        """Every row written, in order, to be read on demand."""
        self._file.flush()
        return LazyRows(self._read, np.arange(self._count), self._shape, self._dtype)

    def _read(self, positions: np.ndarray) -> np.ndarray:
        out = np.empty((len(positions), *self._shape), dtype=self._dtype)
        if len(positions) == 0:
            return out
        # Sorted, so that a run of consecutive rows (a slice, the test split) is one read.
        order = np.argsort(positions, kind="stable")
        ordered = positions[order]
        cuts = np.flatnonzero(np.diff(ordered) != 1) + 1
        fd = self._file.fileno()
        for start, stop in zip(np.r_[0, cuts], np.r_[cuts, len(ordered)], strict=True):
            count, first = int(stop - start), int(ordered[start])
            data = os.pread(fd, count * self._row_bytes, first * self._row_bytes)
            rows = np.frombuffer(data, dtype=self._dtype).reshape(count, *self._shape)
            out[order[start:stop]] = rows
        return out
