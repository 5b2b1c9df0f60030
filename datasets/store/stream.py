"""A shard read chunk by chunk, for shards streamed from the store (datasets/rows/streamed.py):
its labels whole and checked at load (they are small), its features one stored chunk at a
time, each checked as it is read, so a damaged chunk is one ValueError naming the shard."""

from __future__ import annotations

import numpy as np
import zarr

from .format import brief
from .rows import _first_missing, check_values

FIX = "re-create the store with `dane prepare ... --force`"


def shard_name(split: str, index: int, start: int, stop: int) -> str:
    """How errors name a shard: as read_shard names it."""
    return f"shard {index} (rows [{start}, {stop}))" if split == "train" else "the test split"


class ChunkReader:
    """Rows of one split's features, read a stored chunk at a time and checked.

    Opens the group on first use in each process (a reader travels as its path), and is
    safe to call from the prefetch thread: zarr runs its reads on its own event loop.
    """

    def __init__(self, path: str, split: str, what: str) -> None:
        self.path, self.split, self.what = path, split, what
        self._array: zarr.Array | None = None

    @property
    def array(self) -> zarr.Array:
        if self._array is None:
            group = zarr.open_group(self.path, mode="r", zarr_format=3)
            self._array = group[f"{self.split}/x"]
        return self._array

    @property
    def chunk_rows(self) -> int:
        """Rows per stored chunk: the unit a streamed shard reads and caches."""
        return int(self.array.chunks[0])

    def read(self, start: int, stop: int) -> np.ndarray:
        """Feature rows [start, stop) of the split (within one stored chunk), checked."""
        try:
            x = self.array[start:stop]
        except Exception as err:  # zarr, its codecs and the file system raise many types
            raise ValueError(
                f"store {self.path}: {self.what} cannot be read, the chunk holding rows "
                f"[{start}, {stop}) is truncated or corrupted ({type(err).__name__}: "
                f"{brief(err)}); {FIX}"
            ) from None
        if len(x) != stop - start:
            raise ValueError(f"store {self.path}: {self.what} has fewer rows than its range; {FIX}")
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            raise ValueError(f"store {self.path}: {self.what} has NaN or infinite features; {FIX}")
        return x

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_array": None}  # its path, never an open array


def read_labels(
    path: str,
    split: str,
    rows: np.ndarray,
    *,
    what: str,
    task: str,
    num_classes: int | None,
) -> np.ndarray:
    """The labels of the given rows of `split` (sorted absolute indices), checked as
    read_shard checks them; ValueError naming the shard if a chunk of x or y is missing."""
    if not len(rows):
        raise ValueError(f"store {path}: {what} holds no rows; {FIX}")
    low, high = int(rows[0]), int(rows[-1]) + 1
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3)
        missing = _first_missing(group, split, low, high)  # a stat per chunk: no data read
        if missing is None:
            y = group[f"{split}/y"][low:high]
    except Exception as err:
        raise ValueError(
            f"store {path}: {what} cannot be read, a chunk is truncated or corrupted "
            f"({type(err).__name__}: {brief(err)}); {FIX}"
        ) from None
    if missing is not None:
        raise ValueError(f"store {path}: {what} cannot be read, {missing}; {FIX}")
    if len(y) != high - low:
        raise ValueError(f"store {path}: {what} has fewer rows than its range; {FIX}")
    y = y[rows - low] if len(rows) != high - low else y
    check_values(path, what, y, x=None, task=task, num_classes=num_classes)
    return y
