"""Sources: functions that return a train/test split as NumPy arrays, ready to be stored.

Every source runs offline: it reads bundled or local files or generates data from a seed.
This module is the registry (a name, or `KIND:PATH`, to its function); the sources live by
family: builtin.py (digits, digits-tabular, synthetic, mnist-1d), idx.py (idx, fashion-mnist),
npz.py, images.py, cifar.py and convex.py (synthetic-ridge).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from .builtin import (
    load_digits_source,
    load_digits_tabular_source,
    make_mnist1d_source,
    make_synthetic_source,
)
from .cifar import load_cifar10_source, load_cifar100_source
from .convex import make_ridge_source
from .idx import FASHION_MNIST_DIR, load_fashion_mnist_source, load_idx_source
from .images import load_images_source
from .npz import load_npz_source
from .raw import RawDataset, SourceOptions, check_raw_dataset, split_train_test

# Re-exported: callers import the types and checks of sources from here.
__all__ = [
    "FASHION_MNIST_DIR",
    "RawDataset",
    "SourceOptions",
    "check_raw_dataset",
    "load_source",
    "parse_source_name",
    "split_train_test",
]

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
