"""The types every source returns and takes, the seeded train/test split they share, and the
checks every source's arrays pass before they are stored."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .lazy import LazyRows, block_rows, take_rows

SKIPPED_NAMED = 5  # the files a --skip-bad note names before it counts the rest


@dataclass(frozen=True)
class SkippedFiles:
    """The files --skip-bad skipped, in file order, and the note that names them."""

    paths: tuple[str, ...]

    def note(self) -> str:
        """`skipped 7 file(s) Pillow cannot read: a.txt, ..., e.png and 2 more`."""
        head = f"skipped {len(self.paths)} file(s) Pillow cannot read"
        if not self.paths:
            return head
        named, more = self.paths[:SKIPPED_NAMED], len(self.paths) - SKIPPED_NAMED
        return f"{head}: {', '.join(named)}" + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True, kw_only=True)
class RawDataset:
    """A source's output: train and test arrays plus what the store records about them."""

    source: str
    task: str  # "classification" | "regression"
    num_classes: int
    x_train: np.ndarray | LazyRows  # LazyRows: read by write_store a chunk at a time
    y_train: np.ndarray
    x_test: np.ndarray | LazyRows
    y_test: np.ndarray
    attrs: dict = field(default_factory=dict)  # extra store attributes, e.g. {"l2": 0.005}
    skipped: SkippedFiles | None = None  # images with --skip-bad: the files it skipped


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
    skip_bad: bool = False  # images: skip (and name) files Pillow cannot read


def split_train_test(
    x: np.ndarray | LazyRows, y: np.ndarray, *, test_fraction: float, seed: int
) -> tuple[Any, np.ndarray, Any, np.ndarray]:
    """Stratified, seeded split, so that every class appears in both parts in proportion.

    Lazy rows stay unread: each part is the same rows, selected.
    """
    rng = np.random.default_rng(seed)
    test_rows: list[np.ndarray] = []
    for label in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == label))
        test_rows.append(rows[: round(len(rows) * test_fraction)])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_rows)] = True
    return take_rows(x, ~is_test), y[~is_test], take_rows(x, is_test), y[is_test]


def classification_dataset(
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
        rows = _nonfinite_rows(x) if np.issubdtype(x.dtype, np.floating) else []
        if len(rows):
            raise ValueError(
                f"{where}: {len(rows)} {split} sample(s) contain NaN or infinite values "
                f"(first at row {int(rows[0])}); clean or drop them"
            )
    if raw.x_train.shape[1:] != raw.x_test.shape[1:]:
        raise ValueError(
            f"{where}: train samples have shape {raw.x_train.shape[1:]} but test samples "
            f"{raw.x_test.shape[1:]}; both splits need the same sample shape"
        )


def _nonfinite_rows(x: np.ndarray | LazyRows) -> np.ndarray:
    """The rows of `x` holding NaN or infinity, read a block at a time (x may be lazy)."""
    step = block_rows(x.shape[1:], x.dtype.itemsize)
    found = [np.array([], dtype=np.int64)]
    for start in range(0, len(x), step):
        block = x[start : start + step]
        found.append(start + np.flatnonzero(~np.isfinite(block.reshape(len(block), -1)).all(1)))
    return np.concatenate(found)
