"""The types every source returns and takes, and the seeded train/test split they share."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    attrs: dict = field(default_factory=dict)  # extra store attributes, e.g. {"l2": 0.005}


@dataclass(frozen=True, kw_only=True)
class SourceOptions:
    """Options common to sources; a source ignores those it has no use for."""

    seed: int = 0
    samples: int | None = None
    test_fraction: float = 0.2
    image_size: int = 8  # synthetic: the image side
    num_classes: int = 10
    path: str | None = None  # idx / npz / fashion-mnist / images / cifar: where the files are
    resize: tuple[int, int] | None = None  # images: (height, width) to resize to; None: keep
    channels: int | None = None  # images: 1 (grey) or 3 (RGB); None: as the files are
    skip_bad: bool = False  # images: skip (and count) files Pillow cannot read


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
