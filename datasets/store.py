"""The zarr v3 store: one group with train/{x,y}, test/{x,y} and attributes (DESIGN.md 3).

A store is a local folder or lives at an fsspec URL (location.py). A local store is written
into a temporary sibling folder and renamed into place only when complete, so a reader never
sees half a store and an interrupted `prepare` leaves nothing behind; a remote one is
written in place with its attributes last, and removed if the write fails.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.core.sync import sync
from zarr.storage import StorePath

from . import location
from .integrity import DIGEST_KEY, check_digest, metadata_digest
from .partition import PartitionSpec, partition_rows
from .sources import RawDataset, check_raw_dataset

FORMAT_VERSION = 1
CHUNK_BYTES = 4 * 2**20  # chunks of about 4 MiB along the sample axis
ARRAYS = ("train/x", "train/y", "test/x", "test/y")


@dataclass(frozen=True, kw_only=True)
class StoreInfo:
    """What a store holds, read from its attributes and array metadata."""

    path: str
    source: str
    task: str
    num_classes: int
    sample_shape: tuple[int, ...]
    x_dtype: str
    y_dtype: str
    num_train: int
    num_test: int
    shards: tuple[tuple[int, int], ...]
    partition: dict
    normalization: dict
    l2: float = 0.0  # L2 penalty lambda the source recorded (synthetic-ridge); 0 if none

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def is_image(self) -> bool:
        return len(self.sample_shape) == 3


def _chunk_rows(sample_shape: tuple[int, ...], itemsize: int) -> int:
    row_bytes = int(np.prod(sample_shape, dtype=np.int64)) * itemsize
    return max(1, CHUNK_BYTES // max(row_bytes, 1))


def _normalization(x: np.ndarray) -> dict:
    """Per-channel mean and std of images (N, C, H, W) or signals (N, C, L); identity for tabular.

    Two passes over blocks of rows in float64, so that 70k images need no 400 MB copy.
    """
    if x.ndim not in (3, 4):
        return {"mean": [0.0], "std": [1.0]}
    axes = (0, *range(2, x.ndim))  # all but the channel axis
    count = x.size // x.shape[1]
    rows = _chunk_rows(x.shape[1:], 8)
    starts = range(0, len(x), rows)
    mean = sum(x[i : i + rows].sum(axis=axes, dtype=np.float64) for i in starts) / count
    center = mean.reshape(1, -1, *[1] * (x.ndim - 2))
    var = sum(((x[i : i + rows] - center) ** 2).sum(axis=axes) for i in starts) / count
    std = np.sqrt(var)
    return {"mean": mean.tolist(), "std": np.where(std > 0, std, 1.0).tolist()}


def _write_array(group: zarr.Group, name: str, data: np.ndarray) -> None:
    chunks = (min(len(data), _chunk_rows(data.shape[1:], data.dtype.itemsize)), *data.shape[1:])
    # A CRC32C checksum after compression: a corrupted or truncated chunk fails to load
    # (read_shard names it) instead of decoding to plausible garbage. Every chunk is written,
    # even one of zeros (zarr skips those by default), so a missing chunk file is damage.
    array = group.create_array(
        name,
        shape=data.shape,
        dtype=data.dtype,
        chunks=chunks,
        compressors=[ZstdCodec(), Crc32cCodec()],
        config={"write_empty_chunks": True},
    )
    array[...] = data


def write_store(
    raw: RawDataset, partition: PartitionSpec, out: str | os.PathLike, *, force: bool
) -> StoreInfo:
    """Partition `raw` and write it to `out` (a path or an fsspec URL); refuse to replace a
    store unless forced.

    On a file system the store is written into a temporary sibling and renamed into place.
    Object stores have no rename: there the attributes are written last (a store without
    them is refused as incomplete) and a write that fails removes what it wrote.
    """
    out = location.resolve(out)
    check_raw_dataset(raw)
    if location.exists(out) and not force:
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    shard_rows = partition_rows(partition, raw.y_train, raw.num_classes)
    order = np.concatenate(shard_rows)
    bounds = np.cumsum([0, *map(len, shard_rows)])
    attrs = {
        "format_version": FORMAT_VERSION,
        "source": raw.source,
        "task": raw.task,
        "num_classes": raw.num_classes,
        "normalization": _normalization(raw.x_train),
        "shards": [[int(a), int(b)] for a, b in itertools.pairwise(bounds)],
        "partition": partition.as_attrs(),
        **raw.attrs,
    }
    if location.is_remote(out):
        _write_remote(raw, order, attrs, out)
    else:
        _write_local(raw, order, attrs, Path(out))
    return open_store(out)


def _write_group(group: zarr.Group, raw: RawDataset, order: np.ndarray, attrs: dict) -> None:
    _write_array(group, "train/x", raw.x_train[order])
    _write_array(group, "train/y", raw.y_train[order])
    _write_array(group, "test/x", raw.x_test)
    _write_array(group, "test/y", raw.y_test)
    attrs[DIGEST_KEY] = metadata_digest(group, attrs)
    group.attrs.update(attrs)  # written last: a store without attributes is incomplete


def _write_local(raw: RawDataset, order: np.ndarray, attrs: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_group(zarr.open_group(tmp, mode="w", zarr_format=3), raw, order, attrs)
        _replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_remote(raw: RawDataset, order: np.ndarray, attrs: dict, out: str) -> None:
    location.remove(out)  # --force (checked): zarr's mode "w" would not clear every object
    try:
        _write_group(zarr.open_group(out, mode="w", zarr_format=3), raw, order, attrs)
    except BaseException as err:
        location.remove(out)  # no half-written store left at the URL
        if isinstance(err, Exception) and not isinstance(err, ValueError):
            raise ValueError(location.remote_problem(out, err)) from None
        raise


def _replace_dir(src: Path, dst: Path) -> None:
    """Move `src` to `dst`; an existing `dst` is moved aside first and removed only after."""
    if not dst.exists():
        os.replace(src, dst)
        return
    trash = dst.parent / f".{dst.name}.old-{os.getpid()}"
    os.replace(dst, trash)
    os.replace(src, dst)
    shutil.rmtree(trash, ignore_errors=True)


# What a worker that cannot see a store is told (pipeline/tasks.py load_shard).
SHARED_STORE = (
    "a store must be on a file system every worker shares, at the same path, or at a URL "
    "(s3://...) they all reach"
)


def open_store(path: str | os.PathLike) -> StoreInfo:
    """Read and check a store's metadata; ValueError naming the problem and the fix if bad.

    The store's path comes back absolute: workers started in another folder (`dask worker`
    on a cluster of the user's) resolve a relative path elsewhere, or not at all. A remote
    URL (s3://...) comes back as given.
    """
    path = location.resolve(path)
    hint = f"create one with `dane prepare digits --out {path}`"
    if not location.exists(path):
        raise ValueError(f"store {path} does not exist; {hint}")
    try:
        group = zarr.open_group(path, mode="r", zarr_format=3)
    except Exception as err:  # zarr raises several types for "not a group here"
        if location.is_remote(path) and not isinstance(err, (KeyError, FileNotFoundError)):
            raise ValueError(location.remote_problem(path, err)) from None
        raise ValueError(f"{path} is not a zarr v3 store ({type(err).__name__}); {hint}") from None
    attrs = dict(group.attrs)
    version = attrs.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise ValueError(
            f"{path} has format_version {version!r}, this dask-dane reads {FORMAT_VERSION}; "
            f"re-create it with `dane prepare ... --out {path} --force`"
        )
    try:
        train_x, train_y = group["train/x"], group["train/y"]
        test_x, test_y = group["test/x"], group["test/y"]
        shards = tuple((int(a), int(b)) for a, b in attrs["shards"])
        info = StoreInfo(
            path=path,
            source=str(attrs["source"]),
            task=str(attrs["task"]),
            num_classes=int(attrs["num_classes"]),
            sample_shape=tuple(train_x.shape[1:]),
            x_dtype=str(train_x.dtype),
            y_dtype=str(train_y.dtype),
            num_train=int(train_x.shape[0]),
            num_test=int(test_x.shape[0]),
            shards=shards,
            partition=dict(attrs["partition"]),
            normalization=dict(attrs["normalization"]),
            l2=float(attrs.get("l2", 0.0)),
        )
    except Exception as err:  # missing keys or arrays, values of the wrong type, bad JSON
        raise ValueError(
            f"{path} is a zarr store but not in the dask-dane layout (missing or bad "
            f"{_brief(err)}); re-create it with `dane prepare`"
        ) from None
    check_digest(group, attrs, str(path))
    _check_consistent(info, train_y.shape[0], test_y.shape[0], test_x.shape[1:])
    _check_chunks_present(info, group)
    return info


def _check_chunks_present(info: StoreInfo, group: zarr.Group) -> None:
    """ValueError naming the array, rows and shards of a chunk whose file is missing."""
    for name in ARRAYS:
        array = group[name]
        missing = _missing_chunk(array, 0, array.shape[0])
        if missing is None:
            continue
        start, stop = _chunk_range(array, missing)
        where = ""
        if name.startswith("train/"):
            hit = [str(i) for i, (a, b) in enumerate(info.shards) if a < stop and start < b]
            where = f", shard{'s' if len(hit) > 1 else ''} {', '.join(hit)}"
        raise ValueError(
            f"store {info.path} is damaged: the chunk of {name} holding rows [{start}, {stop})"
            f"{where} is missing (its file was deleted); re-create it with "
            f"`dane prepare ... --out {info.path} --force`"
        )


def _missing_chunk(array: zarr.Array, start: int, stop: int) -> int | None:
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


def _first_missing(group: zarr.Group, split: str, start: int, stop: int) -> str | None:
    """Which chunk of `split`'s x or y holding rows [start, stop) is missing, if one is."""
    for name in (f"{split}/x", f"{split}/y"):
        missing = _missing_chunk(group[name], start, stop)
        if missing is not None:
            a, b = _chunk_range(group[name], missing)
            return f"the chunk of {name} holding rows [{a}, {b}) is missing (its file was deleted)"
    return None


def _chunk_range(array: zarr.Array, index: int) -> tuple[int, int]:
    """The [start, stop) rows that chunk `index` holds."""
    rows = array.chunks[0]
    return index * rows, min((index + 1) * rows, array.shape[0])


def _check_consistent(info: StoreInfo, num_train_y: int, num_test_y: int, test_shape) -> None:
    # Attributes are plain JSON read as data (never evaluated); their values are checked here
    # so that a damaged store fails now, with the fix, and not later on a worker.
    problems = []
    if info.num_train < info.num_shards:
        problems.append(
            f"it has {info.num_train} training samples for {info.num_shards} shards "
            "(some shard would be empty); re-create it with at most that many --shards"
        )
    if info.num_shards == 0:
        problems.append("it lists no shards; re-create it")
    if num_train_y != info.num_train or num_test_y != info.num_test:
        problems.append("x and y have different numbers of rows")
    if tuple(test_shape) != info.sample_shape:
        problems.append("train and test samples have different shapes")
    if info.task not in ("classification", "regression"):
        problems.append(f"task {info.task!r} is neither classification nor regression")
    if info.task == "classification" and info.num_classes < 1:
        problems.append(f"num_classes is {info.num_classes}")
    if not (math.isfinite(info.l2) and info.l2 >= 0):
        problems.append(f"l2 is {info.l2}")
    problems += _normalization_problems(info)
    expected_start = 0
    for i, (start, stop) in enumerate(info.shards):
        if start != expected_start:
            problems.append(f"shard {i} range [{start}, {stop}) is not contiguous")
            break
        if stop <= start:
            problems.append(
                f"shard {i} is empty (rows [{start}, {stop})); re-create it with fewer --shards"
            )
            break
        expected_start = stop
    if expected_start != info.num_train:
        problems.append("shard ranges do not cover the training rows")
    if problems:
        fix = "" if "re-create" in problems[0] else "; re-create it with `dane prepare`"
        raise ValueError(f"store {info.path} is inconsistent: {problems[0]}{fix}")


def _brief(err: BaseException) -> str:
    """An exception's message cut to one line (the CLI prints errors as one line)."""
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def _normalization_problems(info: StoreInfo) -> list[str]:
    if len(info.sample_shape) not in (2, 3):  # tabular: no per-channel normalisation
        return []
    channels = info.sample_shape[0]
    values = [info.normalization.get("mean"), info.normalization.get("std")]
    for name, value in zip(("mean", "std"), values, strict=True):
        ok = (
            isinstance(value, list)
            and len(value) == channels
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
            and all(math.isfinite(v) and (name == "mean" or v > 0) for v in value)
        )
        if not ok:
            return [f"normalization {name} is {value!r}, not {channels} finite numbers"]
    return []


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
            f"({type(err).__name__}: {_brief(err)}); {fix}"
        ) from None
    if missing is not None:
        raise ValueError(f"store {path}: {what} cannot be read, {missing}; {fix}")
    if len(x) != stop - start or len(y) != stop - start:
        raise ValueError(f"store {path}: {what} has fewer rows than its range; {fix}")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
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
    return x, y


def label_histograms(info: StoreInfo) -> list[np.ndarray]:
    """Per-shard label counts (classification stores only)."""
    group = zarr.open_group(info.path, mode="r", zarr_format=3)
    labels = group["train/y"][:]
    return [np.bincount(labels[a:b], minlength=info.num_classes) for a, b in info.shards]


def labels_no_shard_holds(histograms: list[np.ndarray]) -> list[int]:
    """The labels with no training row on any shard: a model trained on them never sees them."""
    return [int(label) for label in np.flatnonzero(np.sum(histograms, axis=0) == 0)]
