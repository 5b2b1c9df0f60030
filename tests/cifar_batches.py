"""CIFAR-10 and CIFAR-100 folders of small batches in the real key layout, for
tests/datasets/test_cifar_reading.py and tests/datasets/test_cifar_bad_input.py, which both import
it by name (pyproject.toml's pytest pythonpath)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

ROWS = 20  # images per batch
CIFAR10_NAMES = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]  # fmt: skip


def _dump(path: Path, obj, protocol: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=protocol))


def _batch(rng: np.random.Generator, label_key: bytes, num_classes: int) -> dict:
    """One batch with the keys of the real files (Python 2 str keys read back as bytes)."""
    batch = {
        b"batch_label": b"training batch",
        b"data": rng.integers(0, 256, size=(ROWS, 3072), dtype=np.uint8),
        label_key: rng.integers(0, num_classes, size=ROWS).tolist(),
        b"filenames": [f"img{i}.png".encode() for i in range(ROWS)],
    }
    if label_key == b"fine_labels":
        batch[b"coarse_labels"] = rng.integers(0, 20, size=ROWS).tolist()
    return batch


def _cifar10(folder: Path, protocol: int = 2) -> dict[str, dict]:
    """The seven CIFAR-10 files in `folder`; returns the batches by file name."""
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {name: _batch(rng, b"labels", 10) for name in names}
    for name, batch in batches.items():
        _dump(folder / name, batch, protocol)
    meta = {b"label_names": [n.encode() for n in CIFAR10_NAMES], b"num_cases_per_batch": ROWS}
    _dump(folder / "batches.meta", meta, protocol)
    return batches


def _cifar100(folder: Path) -> dict[str, dict]:
    rng = np.random.default_rng(1)
    batches = {name: _batch(rng, b"fine_labels", 100) for name in ("train", "test")}
    for name, batch in batches.items():
        _dump(folder / name, batch)
    fine = [f"fine{i}".encode() for i in range(100)]
    _dump(folder / "meta", {b"fine_label_names": fine, b"coarse_label_names": [b"c"] * 20})
    return batches
