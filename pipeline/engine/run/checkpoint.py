"""Checkpoints: written to a temporary file, flushed to disk, then renamed into place.

A reader (or a resumed run) therefore sees either the previous complete checkpoint or the new
complete one, never half a file, whenever the driver is killed. Loading uses
`weights_only=True`, so a checkpoint cannot run code. The driver writes them on a background
thread (CheckpointWriter), while it waits for the next round.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
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
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_partial_writes(folder: Path) -> None:
    """Delete temporary files that a killed writer left in `folder` (if it exists)."""
    for path in folder.glob(".*.tmp-*"):
        path.unlink(missing_ok=True)


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


class CheckpointWriter:
    """Checkpoint writes on one background thread, one at a time: torch.save, the fsyncs and
    the rename overlap the driver's wait for the next round instead of preceding it.

    The driver calls `wait` before it writes a round's metrics row, so metrics.jsonl runs at
    most one round ahead of latest.pt, as when it wrote them in turn: a killed driver loses
    at most the round being saved, and a resume drops that row. Leaving the `with` block
    waits for the last write (and raises its error), also when the run fails.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dane-checkpoint")
        self._pending: Future | None = None

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType
    ) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()

    def submit(self, write: Callable[[], None]) -> None:
        """Start `write` once the previous write has finished."""
        self.wait()
        self._pending = self._pool.submit(write)

    def wait(self) -> None:
        """Return once no write is in flight; raise the error of one that failed."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()
