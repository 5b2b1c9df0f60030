"""A store's rows: read_shard checks a shard where it is loaded (on its worker), and the
chunk-presence checks that open_store shares (docs/reference/formats.md)."""

from __future__ import annotations

import asyncio

import numpy as np
import zarr
from zarr.core.sync import sync
from zarr.storage import StorePath

from .format import StoreInfo, brief


def read_rows(path: str, split: str, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows [start, stop) of `split` ("train" or "test") as NumPy arrays."""
    group = zarr.open_group(path, mode="r", zarr_format=3)
    return group[f"{split}/x"][start:stop], group[f"{split}/y"][start:stop]


def read_shard(
    path: str,
    split: str,
    start: int,
    stop: int,
    *,
    index: int,
    task: str,
    num_classes: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """read_rows, checked: ValueError naming the shard if a chunk is damaged or values are bad.

    Runs where the shard is loaded (on its worker), on data that is read anyway, so the
    checks cost one pass over the shard and the driver never reads the whole store.
    """
    what = f"shard {index} (rows [{start}, {stop}))" if split == "train" else "the test split"
    fix = "re-create the store with `dane prepare ... --force`"
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3)
        x_array, y_array = group[f"{split}/x"], group[f"{split}/y"]
        missing = _first_missing(group, split, start, stop)
        if missing is None:
            x, y = x_array[start:stop], y_array[start:stop]
    except Exception as err:  # zarr, its codecs and the file system raise many types
        raise ValueError(
            f"store {path}: {what} cannot be read, a chunk is truncated or corrupted "
            f"({type(err).__name__}: {brief(err)}); {fix}"
        ) from None
    if missing is not None:
        raise ValueError(f"store {path}: {what} cannot be read, {missing}; {fix}")
    if len(x) != stop - start or len(y) != stop - start:
        raise ValueError(f"store {path}: {what} has fewer rows than its range; {fix}")
    check_values(path, what, y, x=x, task=task, num_classes=num_classes)
    return x, y


def check_values(
    path: str,
    what: str,
    y: np.ndarray,
    *,
    x: np.ndarray | None,
    task: str,
    num_classes: int | None,
) -> None:
    """ValueError naming `what` if features (when given) or labels hold bad values; shared by
    read_shard and a streamed shard, which checks its labels at load and each chunk as read."""
    fix = "re-create the store with `dane prepare ... --force`"
    if x is not None and np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        raise ValueError(f"store {path}: {what} has NaN or infinite features; {fix}")
    if task == "classification":
        if not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"store {path}: {what} has non-integer labels ({y.dtype}); {fix}")
        if num_classes is not None and len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise ValueError(
                f"store {path}: {what} has labels outside [0, {num_classes}) "
                f"(min {y.min()}, max {y.max()}); {fix}"
            )
    elif np.issubdtype(y.dtype, np.floating) and not np.isfinite(y).all():
        raise ValueError(f"store {path}: {what} has NaN or infinite targets; {fix}")


def _first_missing(group: zarr.Group, split: str, start: int, stop: int) -> str | None:
    """Which chunk of `split`'s x or y holding rows [start, stop) is missing, if one is."""
    for name in (f"{split}/x", f"{split}/y"):
        missing = missing_chunk(group[name], start, stop)
        if missing is not None:
            a, b = chunk_range(group[name], missing)
            return f"the chunk of {name} holding rows [{a}, {b}) is missing (its file was deleted)"
    return None


def missing_chunk(array: zarr.Array, start: int, stop: int) -> int | None:
    """Index of the first chunk holding rows [start, stop) that is not in the store, or None.

    zarr reads a chunk that is not stored as its fill value (zeros), without an error, and
    the CRC32C codec never runs on it: it checks the bytes of a chunk, not that it exists.
    This asks the store whether each chunk key exists (a stat on a local store); it reads no
    data.
    """
    if stop <= start:
        return None
    rows = array.chunks[0]
    indices = range(start // rows, (stop - 1) // rows + 1)
    rest = (0,) * (array.ndim - 1)  # chunks run along the sample axis only
    keys = [array.metadata.encode_chunk_key((i, *rest)) for i in indices]
    found = sync(_exist([array.store_path / key for key in keys]))
    return next((i for i, ok in zip(indices, found, strict=True) if not ok), None)


async def _exist(paths: list[StorePath]) -> list[bool]:
    return list(await asyncio.gather(*(path.exists() for path in paths)))


def chunk_range(array: zarr.Array, index: int) -> tuple[int, int]:
    """The [start, stop) rows that chunk `index` holds."""
    rows = array.chunks[0]
    return index * rows, min((index + 1) * rows, array.shape[0])


def label_histograms(info: StoreInfo) -> list[np.ndarray]:
    """Per-shard label counts (classification stores only)."""
    group = zarr.open_group(info.path, mode="r", zarr_format=3)
    labels = group["train/y"][:]
    return [np.bincount(labels[a:b], minlength=info.num_classes) for a, b in info.shards]


def labels_no_shard_holds(histograms: list[np.ndarray]) -> list[int]:
    """The labels with no training row on any shard: a model trained on them never sees them."""
    return [int(label) for label in np.flatnonzero(np.sum(histograms, axis=0) == 0)]
