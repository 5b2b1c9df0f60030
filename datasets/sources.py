"""Sources: functions that return a train/test split as NumPy arrays, ready to be stored.

Every source runs offline: it reads bundled or local files or generates data from a seed.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from .cifar import load_cifar10_source, load_cifar100_source
from .convex import make_ridge_source
from .images import load_images_source
from .raw import RawDataset, SourceOptions, split_train_test

__all__ = ["RawDataset", "SourceOptions", "load_source", "split_train_test"]


def load_digits_source(options: SourceOptions) -> RawDataset:
    """scikit-learn's bundled handwritten digits: 1797 grey images of 8x8, values 0..16."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.images.astype(np.uint8)[:, None, :, :]  # (N, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    x_train, y_train, x_test, y_test = split_train_test(
        x, y, test_fraction=options.test_fraction, seed=options.seed
    )
    return RawDataset(
        source="digits",
        task="classification",
        num_classes=10,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
    )


def load_digits_tabular_source(options: SourceOptions) -> RawDataset:
    """scikit-learn's digits as rows of 64 float64 features in [0, 1] (pixel / 16).

    The same images, labels and train/test split as the `digits` source, flattened.
    """
    images = load_digits_source(options)
    return replace(
        images,
        source="digits-tabular",
        x_train=images.x_train.reshape(len(images.x_train), -1).astype(np.float64) / 16.0,
        x_test=images.x_test.reshape(len(images.x_test), -1).astype(np.float64) / 16.0,
    )


def make_synthetic_source(options: SourceOptions) -> RawDataset:
    """A seeded Gaussian mixture of images: one smooth template per class plus pixel noise.

    The templates are blurred random fields so that convolutions have local structure to find;
    the noise level keeps the task learnable but not trivial (a linear model does not reach
    100%). Any size: `samples` images of `image_size` x `image_size`.
    """
    num_samples = options.samples or 2000
    size = options.image_size
    rng = np.random.default_rng(options.seed)
    templates = rng.normal(size=(options.num_classes, 1, size + 2, size + 2))
    # A 3x3 box blur gives neighbouring pixels correlated values, as in real images.
    templates = (
        sum(templates[:, :, i : i + size, j : j + size] for i in range(3) for j in range(3)) / 3.0
    )
    y = rng.integers(0, options.num_classes, size=num_samples).astype(np.int64)
    x = templates[y] + rng.normal(scale=1.5, size=(num_samples, 1, size, size))
    x_train, y_train, x_test, y_test = split_train_test(
        x.astype(np.float32), y, test_fraction=options.test_fraction, seed=options.seed + 1
    )
    return RawDataset(
        source="synthetic",
        task="classification",
        num_classes=options.num_classes,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
    )


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian package dataset-fashion-mnist
MNIST1D_SAMPLES = 5000  # the MNIST-1D paper's 4000 train + 1000 test
MNIST1D_SEED = 42  # mnist1d's default generation seed; --seed shifts it


def _classification(
    source: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> RawDataset:
    """A classification RawDataset with int64 labels; num_classes = largest label + 1."""
    y_train, y_test = y_train.astype(np.int64), y_test.astype(np.int64)
    largest = max(int(y_train.max(initial=0)), int(y_test.max(initial=0)))
    return RawDataset(
        source=source,
        task="classification",
        num_classes=max(largest + 1, 2),
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
    )


def load_idx_source(options: SourceOptions, *, source: str = "idx") -> RawDataset:
    """An MNIST-format directory (`idx:DIR` or `--path DIR`): its own train / test split.

    Images are stored as (N, 1, H, W), uint8 when the files hold bytes.
    """
    from .idx import read_idx_dir

    if options.path is None:
        raise ValueError("source idx needs a directory: use `idx:DIR` or --path DIR")
    arrays = read_idx_dir(options.path)
    return _classification(
        source,
        arrays["train_images"][:, None],
        arrays["train_labels"],
        arrays["test_images"][:, None],
        arrays["test_labels"],
    )


def load_fashion_mnist_source(options: SourceOptions) -> RawDataset:
    """Fashion-MNIST (Xiao et al. 2017) from IDX files: the official 60k / 10k split."""
    path = options.path or FASHION_MNIST_DIR
    if not Path(path).is_dir():
        raise ValueError(
            f"Fashion-MNIST directory {path} does not exist; install the Debian package "
            "(`apt-get install dataset-fashion-mnist`) or pass --path DIR with its IDX files"
        )
    return load_idx_source(replace(options, path=path), source="fashion-mnist")


def load_npz_source(options: SourceOptions) -> RawDataset:
    """A NumPy .npz file (`npz:FILE`) with x_train, y_train, x_test, y_test.

    x is (N, H, W) or (N, C, H, W) images (stored as (N, C, H, W)), or (N, d) tabular rows.
    Integer y means classification; floating y means regression (one output).
    """
    path = Path(options.path or "")
    if options.path is None or not path.is_file():
        raise ValueError(
            f"npz file {options.path} does not exist; use `npz:FILE` with a file written by "
            "numpy.savez(FILE, x_train=..., y_train=..., x_test=..., y_test=...)"
        )
    required = ("x_train", "y_train", "x_test", "y_test")
    how = "numpy.savez(FILE, x_train=..., y_train=..., x_test=..., y_test=...)"
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable .npz file (not a zip archive); use {how}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            arrays = {k: archive[k] for k in required if k in names}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:  # damaged, or pickles
        raise ValueError(f"{path} is not a readable .npz file ({err}); use {how}") from None
    missing = [k for k in required if k not in arrays]
    if missing:
        raise ValueError(
            f"{path} lacks array(s) {', '.join(missing)} (it has {', '.join(names) or 'none'}); "
            f"save it with {how}"
        )
    x_train, y_train, x_test, y_test = (arrays[k] for k in required)
    for name in ("x_train", "x_test"):
        if arrays[name].ndim not in (2, 3, 4):
            raise ValueError(
                f"{path}: {name} has shape {arrays[name].shape}; use (N, d) rows, (N, H, W) or "
                "(N, C, H, W) images"
            )
    if x_train.ndim == 3:  # (N, H, W) grey images get their channel axis
        x_train, x_test = x_train[:, None], x_test[:, None]
    if not np.issubdtype(x_train.dtype, np.number) or x_train.dtype != x_test.dtype:
        raise ValueError(
            f"{path}: x_train ({x_train.dtype}) and x_test ({x_test.dtype}) must have the same "
            "numeric dtype"
        )
    if x_train.dtype not in (np.uint8, np.float32, np.float64):
        x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    source = f"npz:{path.name}"
    if np.issubdtype(y_train.dtype, np.integer) and np.issubdtype(y_test.dtype, np.integer):
        return _classification(source, x_train, y_train, x_test, y_test)
    return RawDataset(
        source=source,
        task="regression",
        num_classes=1,
        x_train=x_train,
        y_train=y_train.astype(np.float32),
        x_test=x_test,
        y_test=y_test.astype(np.float32),
    )


def make_mnist1d_source(options: SourceOptions) -> RawDataset:
    """MNIST-1D (Greydanus 2020), generated here with the mnist1d package's `make_dataset`.

    Never its `get_dataset`, which downloads. `samples` (default 5000) is the total, split
    1 - test_fraction / test_fraction as the package does (4000 / 1000 by default); the
    generation seed is 42 + `seed`, so --seed 0 gives the package's default data set.
    Samples are stored as (N, 1, 40) float32 signals.
    """
    import random

    from mnist1d.data import get_dataset_args, make_dataset
    from mnist1d.utils import ObjectView

    args = get_dataset_args(as_dict=True)
    args.update(
        num_samples=options.samples or MNIST1D_SAMPLES,
        train_split=1.0 - options.test_fraction,
        seed=MNIST1D_SEED + options.seed,
    )
    if args["num_samples"] < 20:
        raise ValueError(f"mnist-1d needs --samples of at least 20 (got {args['num_samples']})")
    # make_dataset seeds NumPy's and Python's global generators: restore them afterwards.
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(ObjectView(args))
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)
    return _classification(
        "mnist-1d",
        data["x"].astype(np.float32)[:, None, :],
        data["y"],
        data["x_test"].astype(np.float32)[:, None, :],
        data["y_test"],
    )


SOURCES: dict[str, Callable[[SourceOptions], RawDataset]] = {
    "digits": load_digits_source,
    "synthetic": make_synthetic_source,
    "fashion-mnist": load_fashion_mnist_source,
    "mnist-1d": make_mnist1d_source,
    "idx": load_idx_source,
    "npz": load_npz_source,
    "synthetic-ridge": make_ridge_source,
    "digits-tabular": load_digits_tabular_source,
    "images": load_images_source,
    "cifar10": load_cifar10_source,
    "cifar100": load_cifar100_source,
}


# Also written `idx:DIR`, `npz:FILE`, `images:DIR`, `cifar10:DIR`, `cifar100:DIR`.
PATH_SOURCES = ("idx", "npz", "images", "cifar10", "cifar100")


def parse_source_name(name: str) -> tuple[str, str | None]:
    """`idx:DIR` -> ("idx", "DIR"); a plain name -> (name, None); ValueError if unknown."""
    kind, sep, path = name.partition(":")
    if sep and kind in PATH_SOURCES and path:
        return kind, path
    if name not in SOURCES:
        known = ", ".join([*sorted(SOURCES), *(f"{k}:PATH" for k in PATH_SOURCES)])
        raise ValueError(f"unknown source {name!r}; choose one of: {known}")
    return name, None


def load_source(name: str, options: SourceOptions) -> RawDataset:
    """Run the source called `name` (or `KIND:PATH` for PATH_SOURCES); ValueError if unknown."""
    kind, path = parse_source_name(name)
    if path is not None:
        if options.path is not None and options.path != path:
            raise ValueError(f"source {name!r} names a path and --path gives another; give one")
        options = replace(options, path=path)
    return SOURCES[kind](options)


def check_raw_dataset(raw: RawDataset) -> None:
    """Check a source's arrays before they are stored.

    Parameters
    ----------
    raw
        The arrays and their description.

    Raises
    ------
    ValueError
        If x and y disagree in rows, train and test samples differ in shape, a class label lies
        outside [0, num_classes), or a feature or target is NaN or infinite.
    """
    where = f"source {raw.source}"
    for split, x, y in (("train", raw.x_train, raw.y_train), ("test", raw.x_test, raw.y_test)):
        if y.ndim != 1 or len(x) != len(y):
            raise ValueError(
                f"{where}: {split} has {len(x)} samples but labels of shape {y.shape}; "
                "give one label per sample"
            )
        if raw.task == "classification":
            if not np.issubdtype(y.dtype, np.integer):
                raise ValueError(f"{where}: {split} labels are {y.dtype}; use integer labels")
            bad = (y < 0) | (y >= raw.num_classes)
            if bad.any():
                raise ValueError(
                    f"{where}: {int(bad.sum())} {split} label(s) outside [0, {raw.num_classes}), "
                    f"e.g. {int(y[bad][0])}; labels must be 0 .. num_classes - 1"
                )
        elif not np.isfinite(y).all():
            raise ValueError(f"{where}: {split} targets contain NaN or infinite values")
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            rows = np.flatnonzero(~np.isfinite(x.reshape(len(x), -1)).all(axis=1))
            raise ValueError(
                f"{where}: {len(rows)} {split} sample(s) contain NaN or infinite values "
                f"(first at row {int(rows[0])}); clean or drop them"
            )
    if raw.x_train.shape[1:] != raw.x_test.shape[1:]:
        raise ValueError(
            f"{where}: train samples have shape {raw.x_train.shape[1:]} but test samples "
            f"{raw.x_test.shape[1:]}; both splits need the same sample shape"
        )
