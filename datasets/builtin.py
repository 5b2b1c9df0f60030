"""The sources that need no files of the user's: scikit-learn's bundled digits (as images or as
feature rows), a seeded synthetic mixture of images, and MNIST-1D generated from its seed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .lazy import ScratchRows, block_rows
from .raw import RawDataset, SourceOptions, classification_dataset, split_train_test

MNIST1D_SAMPLES = 5000  # the MNIST-1D paper's 4000 train + 1000 test
SYNTHETIC_SAMPLES = 2000
MNIST1D_SEED = 42  # mnist1d's default generation seed; --seed shifts it


def load_digits_source(options: SourceOptions) -> RawDataset:
    """scikit-learn's bundled handwritten digits: 1797 grey images of 8x8, values 0..16."""
    from sklearn.datasets import load_digits  # lazily: scikit-learn is slow to import

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
    num_samples = options.samples or SYNTHETIC_SAMPLES
    size = options.image_size
    rng = np.random.default_rng(options.seed)
    templates = rng.normal(size=(options.num_classes, 1, size + 2, size + 2))
    # A 3x3 box blur gives neighbouring pixels correlated values, as in real images.
    templates = (
        sum(templates[:, :, i : i + size, j : j + size] for i in range(3) for j in range(3)) / 3.0
    )
    y = rng.integers(0, options.num_classes, size=num_samples).astype(np.int64)
    # Block by block into a scratch file, so that memory does not grow with --samples. The
    # generator's normals come in one stream whatever the block size: the rows are the ones
    # a single draw of (samples, 1, size, size) gives, bit for bit.
    scratch = ScratchRows((1, size, size), np.float32)
    step = block_rows((1, size, size), 8)
    for start in range(0, num_samples, step):
        labels = y[start : start + step]
        noise = rng.normal(scale=1.5, size=(len(labels), 1, size, size))
        scratch.append((templates[labels] + noise).astype(np.float32))
    x_train, y_train, x_test, y_test = split_train_test(
        scratch.rows(), y, test_fraction=options.test_fraction, seed=options.seed + 1
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
    return classification_dataset(
        "mnist-1d",
        data["x"].astype(np.float32)[:, None, :],
        data["y"],
        data["x_test"].astype(np.float32)[:, None, :],
        data["y_test"],
    )
