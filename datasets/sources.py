"""Sources: functions that return a train/test split as NumPy arrays, ready to be stored.

Every source runs offline: it reads bundled or local files or generates data from a seed.
This module is the registry (a name, or `KIND:PATH`, to its function); the sources live by
family: builtin.py (digits, digits-tabular, synthetic, mnist-1d), idx.py (idx, fashion-mnist),
npz.py, images.py, cifar.py and convex.py (synthetic-ridge).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .builtin import (
    load_digits_source,
    load_digits_tabular_source,
    make_mnist1d_source,
    make_synthetic_source,
)
from .cifar import LAYOUTS, load_cifar10_source, load_cifar100_source
from .convex import make_ridge_source
from .idx import (
    FASHION_MNIST_DIR,
    IDX_STEMS,
    find_idx_file,
    load_fashion_mnist_source,
    load_idx_source,
)
from .images import load_images_source
from .npz import load_npz_source
from .raw import RawDataset, SourceOptions, check_raw_dataset, split_train_test
from .store.mistaken import is_store

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
        raise ValueError(_path_hint(name) or _unknown_source(name))
    return name, None


def _unknown_source(name: str) -> str:
    """The message for a name that is no source: the one it is near, if any, and the list."""
    known = ", ".join([*sorted(SOURCES), *(f"{k}:PATH" for k in PATH_SOURCES)])
    kind, sep, path = name.partition(":")
    if sep and kind in PATH_SOURCES:
        return f"source {name!r} names no path; write {kind}:PATH"
    if sep and (near := difflib.get_close_matches(kind, PATH_SOURCES, n=1, cutoff=0.6)):
        return f"unknown source {name!r}; did you mean {near[0]}:{path}? (sources: {known})"
    if not sep and (near := difflib.get_close_matches(name, SOURCES, n=1, cutoff=0.75)):
        return f"unknown source {name!r}; did you mean {near[0]}? (sources: {known})"
    return f"unknown source {name!r}; choose one of: {known}"


def _path_hint(name: str) -> str | None:
    """For a source name that is an existing file or folder: the KIND:PATH that reads it."""
    path = Path(name).expanduser()
    if ":" in name or not path.exists():
        return None
    if path.is_dir():
        if is_store(path):
            return f"{name} is a store already (prepared); pass it to dane train or dane info"
        kind = _folder_kind(path)
        if kind == "images":
            how = "to read it as images (one sub-folder per class)"
            return f"{name} is a folder; {how} pass images:{name}"
        title = LAYOUTS[kind].title if kind in LAYOUTS else "MNIST-format IDX"
        return f"{name} is a folder of {title} files; to read them pass {kind}:{name}"
    folder = os.path.dirname(name) or "."
    if path.suffix == ".npz":
        return f"{name} is a file; to read its arrays pass npz:{name}"
    if "idx" in path.name and "ubyte" in path.name:
        return f"{name} is an IDX file; pass the folder that holds all four: idx:{folder}"
    for layout in LAYOUTS.values():
        if path.name in layout.files and all((path.parent / f).is_file() for f in layout.files):
            return f"{name} is a {layout.title} file; pass its folder: {layout.name}:{folder}"
    kinds = ", ".join(f"{kind}:PATH" for kind in PATH_SOURCES)
    return f"{name} is a file of no kind dask-dane reads; the sources that read a path: {kinds}"


def _folder_kind(folder: Path) -> str:
    """The path source that reads `folder`: idx, cifar10 or cifar100 by their files, else
    images (the layout with no fixed names)."""
    try:
        find_idx_file(folder, IDX_STEMS["train_images"])
        return "idx"
    except ValueError:
        pass
    for layout in LAYOUTS.values():
        for place in (folder, folder / layout.folder):
            if all((place / f).is_file() for f in layout.files):
                return layout.name
    return "images"


def load_source(name: str, options: SourceOptions) -> RawDataset:
    """Run the source called `name` (or `KIND:PATH` for PATH_SOURCES); ValueError if unknown."""
    kind, path = parse_source_name(name)
    if path is not None:
        if options.path is not None and options.path != path:
            raise ValueError(f"source {name!r} names a path and --path gives another; give one")
        options = replace(options, path=path)
    return SOURCES[kind](options)
