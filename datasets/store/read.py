"""open_store: a store's metadata, read and checked once, on the driver (see
docs/reference/formats.md).

Attributes are plain JSON read as data (never evaluated); their values are checked here so
that a damaged store fails now, with the fix, and not later on a worker.
"""

from __future__ import annotations

import math
import os

import zarr

from .. import location
from ..integrity import check_digest
from .format import ARRAYS, FORMAT_VERSION, StoreInfo, brief
from .mistaken import images_not_store, is_image_tree, is_run_folder, near_store, run_not_store
from .rows import chunk_range, missing_chunk


def open_store(path: str | os.PathLike) -> StoreInfo:
    """Read and check a store's metadata; ValueError naming the problem and the fix if bad.

    The store's path comes back absolute: workers started in another folder (`dask worker`
    on a cluster of the user's) resolve a relative path elsewhere, or not at all. A remote
    URL (s3://...) comes back as given.
    """
    given = str(path)
    path = location.resolve(path)
    group = _open_group(path, given)
    attrs = dict(group.attrs)
    version = attrs.get("format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise ValueError(
            f"{path} has format_version {version!r}, this dask-dane reads {FORMAT_VERSION}; "
            f"re-create it with `dane prepare ... --out {path} --force`"
        )
    try:
        arrays = {name: group[name] for name in ARRAYS}
        info = _info(path, arrays, attrs)
    except Exception as err:  # missing keys or arrays, values of the wrong type, bad JSON
        raise ValueError(
            f"{path} is a zarr store but not in the dask-dane layout (missing or bad "
            f"{brief(err)}); re-create it with `dane prepare`"
        ) from None
    check_digest(group, attrs, str(path))
    _check_consistent(
        info, arrays["train/y"].shape[0], arrays["test/y"].shape[0], arrays["test/x"].shape[1:]
    )
    _check_chunks_present(info, group)
    return info


def _open_group(path: str, given: str) -> zarr.Group:
    """The store's zarr group; ValueError saying what was likely meant (a store of a near
    name, a run folder's store), else how to create one. `given`: the path as the user
    wrote it, for the names the message suggests."""
    hint = f"create one with `dane prepare digits --out {path}`"
    if not location.exists(path):
        near = near_store(given)
        if near is not None:
            raise ValueError(f"store {given} does not exist; did you mean {near}?")
        raise ValueError(f"store {path} does not exist; {hint}")
    if not location.is_remote(path) and is_run_folder(path):
        raise ValueError(run_not_store(given))
    try:
        return zarr.open_group(path, mode="r", zarr_format=3)
    except Exception as err:  # zarr raises several types for "not a group here"
        if location.is_remote(path) and not isinstance(err, (KeyError, FileNotFoundError)):
            raise ValueError(location.remote_problem(path, err)) from None
        if not location.is_remote(path) and is_image_tree(path):  # what `prepare` reads
            raise ValueError(images_not_store(given)) from None
        raise ValueError(f"{path} is not a zarr v3 store ({type(err).__name__}); {hint}") from None


def _info(path: str, arrays: dict[str, zarr.Array], attrs: dict) -> StoreInfo:
    """StoreInfo from the attributes and the arrays; KeyError or TypeError if one is bad."""
    train_x, train_y, test_x = arrays["train/x"], arrays["train/y"], arrays["test/x"]
    shards = tuple((int(a), int(b)) for a, b in attrs["shards"])
    return StoreInfo(
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
        class_names=_class_names(attrs.get("class_names")),
    )


def _class_names(names: object) -> tuple[str, ...] | None:
    return tuple(str(name) for name in names) if isinstance(names, list) else None


def _check_chunks_present(info: StoreInfo, group: zarr.Group) -> None:
    """ValueError naming the array, rows and shards of a chunk whose file is missing."""
    for name in ARRAYS:
        array = group[name]
        missing = missing_chunk(array, 0, array.shape[0])
        if missing is None:
            continue
        start, stop = chunk_range(array, missing)
        where = ""
        if name.startswith("train/"):
            hit = [str(i) for i, (a, b) in enumerate(info.shards) if a < stop and start < b]
            where = f", shard{'s' if len(hit) > 1 else ''} {', '.join(hit)}"
        raise ValueError(
            f"store {info.path} is damaged: the chunk of {name} holding rows [{start}, {stop})"
            f"{where} is missing (its file was deleted); re-create it with "
            f"`dane prepare ... --out {info.path} --force`"
        )


def _check_consistent(info: StoreInfo, num_train_y: int, num_test_y: int, test_shape) -> None:
    """ValueError with the first problem found and its fix, if the metadata disagree."""
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
    problems += _shard_problems(info)
    if problems:
        fix = "" if "re-create" in problems[0] else "; re-create it with `dane prepare`"
        raise ValueError(f"store {info.path} is inconsistent: {problems[0]}{fix}")


def _shard_problems(info: StoreInfo) -> list[str]:
    """Shards must be non-empty, contiguous and cover the training rows
    (docs/reference/formats.md)."""
    problems = []
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
    return problems


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
