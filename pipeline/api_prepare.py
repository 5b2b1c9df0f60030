"""`dask_dane.prepare`: a store from NumPy arrays or from a named source, as `dane prepare`.

A named source is the CLI's SOURCE argument (`"digits"`, `"fashion-mnist"`, `"images:DIR"`,
`"npz:FILE"`, ...), with its options as keywords; arrays are the notebook's own data.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..datasets import location
from ..datasets.images import image_source_options
from ..datasets.partition import PartitionSpec, validate_partition
from ..datasets.raw import RawDataset, SkippedFiles, SourceOptions
from ..datasets.sources import load_source, parse_source_name
from ..datasets.store import StoreInfo, open_store, write_store
from .keywords import reword
from .launchers.errors import refuse_in_spawned_import

Arrays = tuple[np.ndarray, np.ndarray]


def prepare(
    out: str | Path,
    source: str | None = None,
    *,
    train: Arrays | None = None,
    test: Arrays | None = None,
    shards: int = PartitionSpec.num_shards,
    partition: str = PartitionSpec.kind,
    num_classes: int | None = None,
    seed: int = PartitionSpec.seed,
    alpha: float = PartitionSpec.alpha,
    classes_per_shard: int = PartitionSpec.classes_per_shard,
    test_fraction: float = SourceOptions.test_fraction,
    samples: int | None = None,
    image_size: str | int | None = None,
    channels: int | None = None,
    path: str | Path | None = None,
    skip_bad: bool = SourceOptions.skip_bad,
    force: bool = False,
    exist_ok: bool = False,
) -> Path:
    """Write a sharded store from a named source or from NumPy arrays; return its path.

    Parameters
    ----------
    out
        Where to write the store (a path or an fsspec URL such as s3://bucket/x.zarr).
    source
        A source by name, as `dane prepare` takes it: ``"digits"``, ``"synthetic"``,
        ``"mnist-1d"``, ``"fashion-mnist"``, ``"images:DIR"`` (one folder per class),
        ``"idx:DIR"``, ``"npz:FILE"``, ``"cifar10:DIR"``, ... Give either it or `train`
        and `test`.
    train, test
        ``(x, y)`` arrays: x is (N, C, H, W) for images (uint8 or float32), (N, C, L) for
        signals or (N, d) for tabular rows; y holds integer labels (classification) or
        floats (regression).
    shards
        The number of pieces the training rows are split into (one or more per worker).
    partition
        ``"iid"``, ``"label-skew"`` (`classes_per_shard` labels a shard) or ``"dirichlet"``
        (label proportions drawn with concentration `alpha`).
    num_classes
        Arrays only: the number of classes, when y does not show them all.
    seed
        Seeds the partition (and a source's own split and generation).
    alpha, classes_per_shard
        The skew of the dirichlet and label-skew partitions.
    test_fraction, samples, image_size, channels, path, skip_bad
        A named source's options, as `dane prepare`'s flags: the test share of a source
        without its own test split, the rows to generate, the image size (H or "HxW"),
        1 (grey) or 3 (RGB) channels, where the files are, and whether to skip files Pillow
        cannot read.
    force
        Replace a store already at `out`.
    exist_ok
        Reuse a store already at `out` when it holds what this call would write (the same
        source, or arrays of the same shapes, labels, test rows and normalisation, and the
        same shards and partition), so that a script runs again unchanged; a store that
        differs raises ValueError naming the difference.

    Returns
    -------
    pathlib.Path
        The store's path, to pass to `train`.

    Raises
    ------
    TypeError
        If neither or both of `source` and `train`/`test` are given.
    ValueError
        For a bad option, an unknown source, an existing store without `force` or
        `exist_ok`, or one that `exist_ok` finds different.
    """
    refuse_in_spawned_import()  # a worker re-running a script without a main guard
    spec = PartitionSpec(
        kind=partition, num_shards=shards, seed=seed, alpha=alpha,
        classes_per_shard=classes_per_shard,
    )  # fmt: skip
    try:
        if source is not None and (train is not None or test is not None):
            raise TypeError("prepare() takes a source or train= and test= arrays, not both")
        if source is None and (train is None or test is None):
            raise TypeError("prepare() needs a source ('digits', say) or train= and test= arrays")
        arrays = None if train is None or test is None else _from_arrays(train, test, num_classes)
        if _exists(out, force=force, exist_ok=exist_ok):
            return Path(reused_store(out, spec, source=source, arrays=arrays).path)
        if source is not None:
            info = write_source(
                source, out, spec, force=force, test_fraction=test_fraction, samples=samples,
                image_size=None if image_size is None else str(image_size), channels=channels,
                skipped=lambda files: warnings.warn(files.note(), stacklevel=4),  # prepare's caller
                seed=seed, skip_bad=skip_bad, path=None if path is None else str(path),
                **({"num_classes": num_classes} if num_classes is not None else {}),
            )  # fmt: skip
        else:
            info = write_store(arrays, spec, out, force=force)
        return Path(info.path)
    except ValueError as err:  # the store's and sources' checks name the CLI's flags
        reword(err)
        raise


def write_source(
    source: str,
    out: str | Path,
    spec: PartitionSpec,
    *,
    force: bool,
    test_fraction: float,
    samples: int | None,
    image_size: str | None,
    channels: int | None,
    skipped: Callable[[SkippedFiles], None],
    **options: Any,
) -> StoreInfo:
    """SOURCE's data written as a store at `out`, as `dane prepare` and `prepare` write it: its
    options, `out` and the partition checked before any data is loaded; `skipped(files)` with
    the files Pillow cannot read that --skip-bad skipped. `options` are SourceOptions' other
    fields; the errors name the CLI's flags (the API rewords them)."""
    kind, _ = parse_source_name(source)  # an unknown source fails before any work
    image_options = image_source_options(kind, image_size=image_size, channels=channels)
    if not 0 < test_fraction < 1:
        raise ValueError(f"--test-fraction must be between 0 and 1 (got {test_fraction})")
    if samples is not None and samples < 2:
        raise ValueError(f"--samples must be at least 2 (got {samples})")
    if location.exists(location.resolve(out)) and not force:  # before any data is loaded
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    validate_partition(spec, num_samples=max(spec.num_shards, 1), num_classes=10)
    raw = load_source(
        source,
        SourceOptions(samples=samples, test_fraction=test_fraction, **image_options, **options),
    )
    if raw.skipped is not None:
        skipped(raw.skipped)
    return write_store(raw, spec, out, force=force)


def _exists(out: str | Path, *, force: bool, exist_ok: bool) -> bool:
    """Whether a store at `out` is to be reused; ValueError for one neither flag allows."""
    if force and exist_ok:
        raise ValueError(
            "pass force=True to replace the store or exist_ok=True to reuse it, not both"
        )
    if force or not location.exists(location.resolve(out)):
        return False
    if not exist_ok:
        raise ValueError(
            f"{out} already exists; pass force=True to replace it, exist_ok=True to reuse it, "
            "or choose another out"
        )
    return True


def reused_store(
    out: str | Path, spec: PartitionSpec, *, source: str | None, arrays: RawDataset | None
) -> StoreInfo:
    """The store at `out`, checked to hold what `prepare` was asked to write: the same source
    (or arrays), shards and partition. ValueError naming the first difference and the fix."""
    info = open_store(out)
    differences = [
        f"{what} {there} there, {here} here"
        for what, there, here in _recorded(info, spec, source, arrays)
        if there != here
    ]
    if arrays is not None and not differences:
        differences = _content_differences(info, arrays)
    if differences:
        raise ValueError(
            f"{out} holds another store ({differences[0]}); pass force=True to replace it "
            "or choose another out"
        )
    return info


def _recorded(
    info: StoreInfo, spec: PartitionSpec, source: str | None, arrays: RawDataset | None
) -> list[tuple[str, object, object]]:
    """(what, in the store, asked for) for what the store's attributes record."""
    asked = "arrays" if source is None else parse_source_name(source)[0]
    pairs = [("source", info.source.partition(":")[0], asked)]  # "images:DIR" is "images"
    if arrays is not None:
        pairs += [
            ("task", info.task, arrays.task),
            ("num_classes", info.num_classes, arrays.num_classes),
            ("sample shape", info.sample_shape, tuple(arrays.x_train.shape[1:])),
            ("training rows", info.num_train, len(arrays.x_train)),
            ("test rows", info.num_test, len(arrays.x_test)),
        ]
    pairs.append(("shards", info.num_shards, spec.num_shards))
    for key, value in spec.as_attrs().items():  # kind, seed, alpha or classes_per_shard
        pairs.append(("partition" if key == "kind" else key, info.partition.get(key), value))
    return pairs


def _content_differences(info: StoreInfo, arrays: RawDataset) -> list[str]:
    """What differs between the arrays and the store of the same shapes: the test rows, the
    training labels, and the training images' per-channel mean (rows are stored shuffled)."""
    group = zarr.open_group(info.path, mode="r", zarr_format=3)
    found = []
    if not (
        np.array_equal(group["test/x"][:], arrays.x_test)
        and np.array_equal(group["test/y"][:], arrays.y_test)
    ):
        found.append("the test arrays differ")
    if not np.array_equal(np.sort(group["train/y"][:]), np.sort(arrays.y_train)):
        found.append("the training labels differ")
    x = arrays.x_train
    if x.ndim in (3, 4):  # images and signals: the store records the per-channel mean
        mean = x.mean(axis=(0, *range(2, x.ndim)), dtype=np.float64)
        if not np.allclose(mean, info.normalization["mean"], rtol=1e-6, atol=1e-9):
            found.append("the training images' mean differs")
    return found


def _from_arrays(train: Arrays, test: Arrays, num_classes: int | None) -> RawDataset:
    """A RawDataset of the caller's arrays; the task follows y's dtype."""
    (x_train, y_train), (x_test, y_test) = train, test
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    classification = np.issubdtype(y_train.dtype, np.integer)
    if num_classes is None:
        num_classes = int(max(y_train.max(), y_test.max())) + 1 if classification else 1
    return RawDataset(
        source="arrays",
        task="classification" if classification else "regression",
        num_classes=num_classes,
        x_train=np.asarray(x_train),
        y_train=y_train.astype(np.int64) if classification else y_train,
        x_test=np.asarray(x_test),
        y_test=y_test.astype(np.int64) if classification else y_test,
    )
