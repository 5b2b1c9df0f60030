"""The `npz:FILE` source: a NumPy .npz archive of x_train, y_train, x_test, y_test."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from .lazy import LazyRows, ScratchRows, block_rows
from .raw import RawDataset, SourceOptions, classification_dataset

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
HOW = "numpy.savez(FILE, x_train=..., y_train=..., x_test=..., y_test=...)"


def load_npz_source(options: SourceOptions) -> RawDataset:
    """A NumPy .npz file (`npz:FILE`) with x_train, y_train, x_test, y_test.

    x is (N, H, W) or (N, C, H, W) images (stored as (N, C, H, W)), or (N, d) tabular rows.
    Integer y means classification; floating y means regression (one output). The x arrays
    are checked from their headers and then copied a block at a time into scratch files
    (compressed or not), so the archive's x never sits in memory whole.
    """
    path = Path(options.path or "")
    if options.path is None or not path.is_file():
        raise ValueError(
            f"npz file {options.path} does not exist; use `npz:FILE` with a file written by {HOW}"
        )
    labels, headers = _read_archive(path)
    (train_shape, train_dtype), (_, test_dtype) = headers["x_train"], headers["x_test"]
    for name, (shape, _) in headers.items():
        if len(shape) not in (2, 3, 4):
            raise ValueError(
                f"{path}: {name} has shape {shape}; use (N, d) rows, (N, H, W) or "
                "(N, C, H, W) images"
            )
    if not np.issubdtype(train_dtype, np.number) or train_dtype != test_dtype:
        raise ValueError(
            f"{path}: x_train ({train_dtype}) and x_test ({test_dtype}) must have the same "
            "numeric dtype"
        )
    # The store holds uint8 images or float32/float64 rows (docs/reference/formats.md):
    # other numbers widen. (N, H, W) grey images get their channel axis.
    stored = train_dtype if train_dtype in (np.uint8, np.float32, np.float64) else np.float32
    grey = len(train_shape) == 3
    x_train, x_test = (_copy_rows(path, name, stored, grey=grey) for name in ("x_train", "x_test"))
    y_train, y_test = labels["y_train"], labels["y_test"]
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


def _unreadable(path: Path, err: Exception) -> ValueError:
    return ValueError(f"{path} is not a readable .npz file ({err}); use {HOW}")


def _read_archive(path: Path) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
    """The y arrays, and the x arrays' (shape, dtype) from their headers; ValueError naming
    what is wrong with the archive."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable .npz file (not a zip archive); use {HOW}")
    try:
        # allow_pickle=False: an archive is data; a pickled object array would run code.
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            missing = [k for k in REQUIRED if k not in names]
            if missing:
                raise LookupError(", ".join(missing))
            labels = {k: archive[k] for k in ("y_train", "y_test")}
        headers = {k: _header(path, k)[:2] for k in ("x_train", "x_test")}
    except LookupError as missing:
        raise ValueError(
            f"{path} lacks array(s) {missing.args[0]} (it has {', '.join(names) or 'none'}); "
            f"save it with {HOW}"
        ) from None
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:  # damaged, or pickles
        raise _unreadable(path, err) from None
    return labels, headers


def _header(path: Path, name: str) -> tuple[tuple[int, ...], np.dtype, bool]:
    """The shape, dtype and Fortran order of member `name`, read from its .npy header."""
    with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
        return _read_header(member)


def _read_header(member: IO[bytes]) -> tuple[tuple[int, ...], np.dtype, bool]:
    version = np.lib.format.read_magic(member)
    readers = {
        (1, 0): np.lib.format.read_array_header_1_0,
        (2, 0): np.lib.format.read_array_header_2_0,
    }
    if version not in readers:  # 3.0 (UTF-8 field names) has no public reader
        raise ValueError(f".npy format version {version} is not supported")
    shape, fortran, dtype = readers[version](member)
    if dtype.hasobject:  # as np.load with allow_pickle=False refuses them
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    return shape, dtype, fortran


def _copy_rows(path: Path, name: str, stored: np.dtype, *, grey: bool) -> LazyRows:
    """Member `name` copied a block of rows at a time into a scratch file, as `stored`."""
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
            shape, dtype, fortran = _read_header(member)
            sample = (1, *shape[1:]) if grey else shape[1:]
            scratch = ScratchRows(sample, stored)
            if fortran:  # rows are not contiguous in the file: read it whole (rare)
                with archive.open(f"{name}.npy") as again:
                    whole = np.lib.format.read_array(again, allow_pickle=False)
                scratch.append(whole.reshape(len(whole), *sample).astype(stored))
                return scratch.rows()
            step = block_rows(shape[1:], dtype.itemsize)
            for start in range(0, shape[0], step):
                count = min(step, shape[0] - start)
                data = member.read(count * dtype.itemsize * int(np.prod(shape[1:])))
                block = np.frombuffer(data, dtype=dtype).reshape(count, *sample)
                scratch.append(block.astype(stored))  # elementwise, as the whole array's
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise _unreadable(path, err) from None
    return scratch.rows()
