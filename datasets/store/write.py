"""write_store: partition a source's arrays and write them as a store (see
docs/reference/formats.md).

A local store is written into a temporary sibling folder and renamed into place only when
complete; a remote one is written in place with its attributes last, and removed if the
write fails.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from .. import location
from ..integrity import DIGEST_KEY, metadata_digest
from ..lazy import LazyRows
from ..partition import PartitionSpec, partition_rows
from ..raw import RawDataset, check_raw_dataset
from .format import FORMAT_VERSION, StoreInfo
from .read import open_store

CHUNK_BYTES = 4 * 2**20  # chunks of about 4 MiB along the sample axis


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


def _write_array(
    group: zarr.Group, name: str, data: np.ndarray | LazyRows, order: np.ndarray | None = None
) -> None:
    """Write `data` (its rows `order`, when given) chunk by chunk, reading each chunk's rows
    only when it is written: a lazy source's rows are never all in memory at once."""
    num_rows = len(data) if order is None else len(order)
    chunk_rows = min(num_rows, _chunk_rows(data.shape[1:], data.dtype.itemsize))
    # A CRC32C checksum after compression: a corrupted or truncated chunk fails to load
    # (read_shard names it) instead of decoding to plausible garbage. Every chunk is written,
    # even one of zeros (zarr skips those by default), so a missing chunk file is damage.
    array = group.create_array(
        name,
        shape=(num_rows, *data.shape[1:]),
        dtype=data.dtype,
        chunks=(chunk_rows, *data.shape[1:]),
        compressors=[ZstdCodec(), Crc32cCodec()],
        config={"write_empty_chunks": True},
    )
    for start in range(0, num_rows, max(chunk_rows, 1)):
        rows = slice(start, start + chunk_rows)
        array[rows] = data[rows] if order is None else data[order[rows]]


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
        raise _exists(out)
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
        _write_local(raw, order, attrs, Path(out), force=force)
    return open_store(out)


def _write_group(group: zarr.Group, raw: RawDataset, order: np.ndarray, attrs: dict) -> None:
    _write_array(group, "train/x", raw.x_train, order)
    _write_array(group, "train/y", raw.y_train, order)
    _write_array(group, "test/x", raw.x_test)
    _write_array(group, "test/y", raw.y_test)
    attrs[DIGEST_KEY] = metadata_digest(group, attrs)
    group.attrs.update(attrs)  # written last: a store without attributes is incomplete


def _write_local(
    raw: RawDataset, order: np.ndarray, attrs: dict, out: Path, *, force: bool
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_group(zarr.open_group(tmp, mode="w", zarr_format=3), raw, order, attrs)
        if force:
            _replace_dir(tmp, out)
        else:
            _place_new(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _place_new(src: Path, dst: Path) -> None:
    """Move `src` to `dst`, which must not exist: a store another process placed there while
    this one wrote (two first runs at once, say) is kept, never swapped under its readers."""
    try:
        os.rename(src, dst)  # onto an empty folder it succeeds, onto a store it fails
    except OSError:
        if not dst.exists():
            raise
        raise _exists(dst) from None


def _exists(out: str | Path) -> ValueError:
    return ValueError(f"{out} already exists; pass --force to replace it or choose another --out")


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
