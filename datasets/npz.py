"""The `npz:FILE` source: a NumPy .npz archive of x_train, y_train, x_test, y_test."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .raw import RawDataset, SourceOptions, classification_dataset

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
HOW = "numpy.savez(FILE, x_train=..., y_train=..., x_test=..., y_test=...)"


def load_npz_source(options: SourceOptions) -> RawDataset:
    """A NumPy .npz file (`npz:FILE`) with x_train, y_train, x_test, y_test.

    x is (N, H, W) or (N, C, H, W) images (stored as (N, C, H, W)), or (N, d) tabular rows.
    Integer y means classification; floating y means regression (one output).
    """
    path = Path(options.path or "")
    if options.path is None or not path.is_file():
        raise ValueError(
            f"npz file {options.path} does not exist; use `npz:FILE` with a file written by {HOW}"
        )
    arrays = _read_arrays(path)
    x_train, y_train, x_test, y_test = (arrays[k] for k in REQUIRED)
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
    # The store holds uint8 images or float32/float64 rows (docs/architecture.md section 3):
    # other numbers widen.
    if x_train.dtype not in (np.uint8, np.float32, np.float64):
        x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    source = f"npz:{path.name}"
    if np.issubdtype(y_train.dtype, np.integer) and np.issubdtype(y_test.dtype, np.integer):
        return classification_dataset(source, x_train, y_train, x_test, y_test)
    return RawDataset(
        source=source,
        task="regression",
        num_classes=1,
        x_train=x_train,
        y_train=y_train.astype(np.float32),
        x_test=x_test,
        y_test=y_test.astype(np.float32),
    )


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The four required arrays of the archive; ValueError naming what is wrong with it."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable .npz file (not a zip archive); use {HOW}")
    try:
        # allow_pickle=False: an archive is data; a pickled object array would run code.
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            arrays = {k: archive[k] for k in REQUIRED if k in names}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:  # damaged, or pickles
        raise ValueError(f"{path} is not a readable .npz file ({err}); use {HOW}") from None
    missing = [k for k in REQUIRED if k not in arrays]
    if missing:
        raise ValueError(
            f"{path} lacks array(s) {', '.join(missing)} (it has {', '.join(names) or 'none'}); "
            f"save it with {HOW}"
        )
    return arrays
