"""Checkpoints: written to a temporary file, flushed to disk, then renamed into place.

A reader (or a resumed run) therefore sees either the previous complete checkpoint or the new
complete one, never half a file, whenever the driver is killed. Loading uses
`weights_only=True`, so a checkpoint cannot run code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_VERSION = 1


def atomic_write_bytes(path: Path, write: Any) -> None:
    """Call write(file) on a temporary sibling, fsync it, and rename it over `path`."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_partial_writes(folder: Path) -> list[Path]:
    """Delete temporary files that a killed writer left in `folder`; return what was removed."""
    partial = sorted(folder.glob(".*.tmp-*")) if folder.is_dir() else []
    for path in partial:
        path.unlink(missing_ok=True)
    return partial


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Atomically save {round, weights, state, ...} (tensors, numbers, strings, dicts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"checkpoint_version": CHECKPOINT_VERSION, **payload}
    atomic_write_bytes(path, lambda handle: torch.save(data, handle))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint saved by save_checkpoint; ValueError if missing or unreadable."""
    if not path.exists():
        raise ValueError(f"no checkpoint at {path}; train first (dane train --out DIR)")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a damaged file
        raise ValueError(f"checkpoint {path} cannot be read ({type(err).__name__})") from None
    if data.get("checkpoint_version") != CHECKPOINT_VERSION:
        raise ValueError(f"checkpoint {path} has an unknown version; re-run training")
    return data
