"""Sources: functions that return a train/test split as NumPy arrays, ready to be stored.

Every source runs offline: it reads bundled or local files or generates data from a seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class RawDataset:
    """A source's output: train and test arrays plus what the store records about them."""

    source: str
    task: str  # "classification" | "regression"
    num_classes: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Options common to sources; a source ignores those it has no use for."""

    seed: int = 0
    samples: int | None = None
    test_fraction: float = 0.2
    image_size: int = 8
    num_classes: int = 10


def split_train_test(
    x: np.ndarray, y: np.ndarray, *, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded split, so that every class appears in both parts in proportion."""
    rng = np.random.default_rng(seed)
    test_rows: list[np.ndarray] = []
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        test_rows.append(rows[: round(len(rows) * test_fraction)])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_rows)] = True
    return x[~is_test], y[~is_test], x[is_test], y[is_test]


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


SOURCES: dict[str, Callable[[SourceOptions], RawDataset]] = {
    "digits": load_digits_source,
    "synthetic": make_synthetic_source,
}


def load_source(name: str, options: SourceOptions) -> RawDataset:
    """Run the source called `name`; an unknown name is a ValueError listing the known ones."""
    if name not in SOURCES:
        known = ", ".join(sorted(SOURCES))
        raise ValueError(f"unknown source {name!r}; choose one of: {known}")
    return SOURCES[name](options)
