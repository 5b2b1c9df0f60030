"""A shard on its worker: its rows as tensors where they are computed on, and its objective.

No Dask: load_shard (a task, re-exported by tasks.py) builds a ShardData on the worker the
shard is pinned to, and every round's task on that shard turns it into a ShardObjective here.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ....datasets import location
from ....datasets.rows.features import StoredRows, normalizer, stored_rows
from ....datasets.rows.streamed import CACHE_CHUNKS, PASS_CACHE_CHUNKS, StreamedRows
from ....datasets.store import SHARED_STORE, read_shard
from ....datasets.store.stream import ChunkReader, read_labels, shard_name
from ....models.flat import Buffers
from ....models.registry import ModelSpec, build_model
from .augment import parse_augment
from .objective import ShardObjective
from .worker_state import WORKER


@dataclass(frozen=True, kw_only=True)
class ShardData:
    """A shard's rows on one worker: features as stored (features.py), labels as tensors."""

    index: int
    x: StoredRows  # a plain tensor given here is taken as already converted
    y: torch.Tensor
    task: str
    # The test split only: every shard's held-out validation rows (part_positions), scored
    # beside it.
    held_out: ShardData | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "x", StoredRows.of(self.x))


def worker_id() -> str:
    """This process's identity; on a worker it names the worker in the round's metrics."""
    return f"{socket.gethostname()}:{os.getpid()}"


def load_shard(
    store: str,
    *,
    split: str,
    start: int,
    stop: int,
    index: int,
    task: str,
    normalization: dict,
    dtype: str,
    num_classes: int | None = None,
    device: str = "cpu",
    shard_memory: str = "resident",
    part: str = "all",
    val_fraction: float = 0.0,
    seed: int = 0,
) -> ShardData:
    """Read rows [start, stop) of a split from zarr, check them, and hold them as tensors.

    The tensors go to `device` (config.device: auto = this worker's GPU if it has one) and
    stay there: every round's work on the shard runs where its rows are. uint8 images stay
    uint8 there, converted and normalised per minibatch (features.py); with `shard_memory`
    "converted" they are converted once, at load, as before issue 36. With "stream" (the
    driver resolves auto) the features stay in the store, read a chunk at a time as the
    rounds need them (streamed.py); the labels are read whole.

    A damaged chunk, labels outside [0, num_classes) or non-finite values raise ValueError
    naming the shard (datasets/store/rows.py read_shard); the driver reports it as one line.

    `part` picks the training rows, the held-out validation rows or all of them (the split,
    part_positions below, is computed here from the rows read, so every loader removes the
    same rows).
    """
    _check_visible(store)
    splits = part != "all" and (val_fraction > 0.0 or part == "val")  # else every row is kept
    # Streamed: features read a chunk at a time as rounds need them. A shard's held-out rows
    # are read that way too, so the worker that scores them never holds a whole shard for them.
    if shard_memory == "stream" or (part == "val" and val_fraction > 0.0):
        how = dict(normalization=normalization, dtype=dtype, num_classes=num_classes)
        rows = np.arange(start, stop)
        if splits:  # the split, from the labels
            what = shard_name(split, index, start, stop)
            y = read_labels(store, split, rows, what=what, task=task, num_classes=num_classes)
            rows = start + part_positions(y, part, val_fraction, seed=seed, index=index)
        # The test split and the validation rows are only read in full passes, in order.
        passes_only = split == "test" or part == "val"
        how["cache_chunks"] = PASS_CACHE_CHUNKS if passes_only else CACHE_CHUNKS
        if len(rows):  # none: a shard too small to hold a row out (read below, empty)
            return streamed_shard(store, split, rows, index, task, device, **how)
    x, y = read_shard(store, split, start, stop, index=index, task=task, num_classes=num_classes)
    if splits:
        kept = part_positions(y, part, val_fraction, seed=seed, index=index)
        x, y = x[kept], y[kept]
    torch_dtype, where = getattr(torch, dtype), resolve_device(device)
    stored = torch.from_numpy(np.ascontiguousarray(x)).to(where)
    del x  # on a GPU worker the host copy goes now
    if shard_memory == "converted":  # held in the run's dtype: stored_rows normalises in place
        stored = stored.to(torch_dtype)
    features = stored_rows(stored, torch_dtype, normalization)
    return ShardData(index=index, x=features, y=_targets(y, task, torch_dtype, where), task=task)


def _check_visible(store: str) -> None:
    """ValueError, naming this worker, where it cannot see the store the driver saw."""
    try:
        seen = location.exists(store)
    except ValueError as err:  # a remote store this worker cannot reach
        raise ValueError(f"worker {worker_id()}: {err}") from None
    if not seen:  # the driver saw it (open_store): this worker does not
        raise ValueError(f"worker {worker_id()} cannot see the store {store}; {SHARED_STORE}")


def streamed_shard(
    store: str,
    split: str,
    rows: np.ndarray,
    index: int,
    task: str,
    device: str,
    *,
    normalization: dict,
    dtype: str,
    num_classes: int | None,
    cache_chunks: int = CACHE_CHUNKS,
) -> ShardData:
    """The given rows (sorted indices into `split`: a range, or the rows a shard keeps) with
    features streamed from the store (streamed.py), labels read whole and checked."""
    what = shard_name(split, index, int(rows[0]) if len(rows) else 0, int(rows[-1]) + 1)
    y = read_labels(store, split, rows, what=what, task=task, num_classes=num_classes)
    reader = ChunkReader(store, split, what)
    torch_dtype, where = getattr(torch, dtype), resolve_device(device)
    mean, std = normalizer(reader.array.ndim, torch_dtype, where, normalization)
    x = StreamedRows(
        reader, rows, dtype=torch_dtype, mean=mean, std=std, device=where, cache_chunks=cache_chunks
    )
    return ShardData(index=index, x=x, y=_targets(y, task, torch_dtype, where), task=task)


def _targets(y: np.ndarray, task: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Labels as a tensor on `device`: long for classification, else in the run's dtype."""
    targets = torch.from_numpy(np.ascontiguousarray(y)).to(device)
    return targets.long() if task == "classification" else targets.to(dtype)


def load_evaluation(test: dict, val: list[dict]) -> ShardData:
    """The test split, carrying the validation rows each shard holds out (`val`: load_shard's
    arguments per shard, part="val"; none: no split). Read on the worker that scores it, from
    the store: the training shards stay where they are. Each is held as its arguments'
    shard_memory says: the validation rows are read a chunk at a time either way, and then
    held (resident) or left in the store (stream)."""
    split = load_shard(**test)
    parts = [part for part in (load_shard(**args) for args in val) if len(part.y)]
    if not parts:
        return split
    streamed = val[0]["shard_memory"] == "stream" and all(
        isinstance(p.x, StreamedRows) for p in parts
    )
    x = (
        StreamedRows.join([p.x for p in parts])
        if streamed
        else StoredRows.concat([p.x for p in parts])
    )
    y = torch.cat([p.y for p in parts])
    return dataclasses.replace(split, held_out=ShardData(index=-2, x=x, y=y, task=split.task))


def resolve_device(name: str) -> torch.device:
    """config.device on this process: auto is the current GPU if torch sees one, else CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"--device cuda, but the worker on {socket.gethostname()} sees no GPU; use "
            "--device cpu or auto"
        )
    return torch.device(name)


def to_device(value: Any, device: torch.device) -> Any:
    """Tensors (also inside dicts and state dataclasses) moved to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return dataclasses.replace(
            value, **{f.name: to_device(getattr(value, f.name), device) for f in fields}
        )
    return value


def make_objective(
    spec: ModelSpec, shard: ShardData, buffers: Buffers | None = None, seed: int = 0
) -> ShardObjective:
    """f_i of `shard` under the model `spec` describes (its L2 penalty included).

    `buffers` (the round's running statistics, if the model has any) are copied: the shard's
    local steps update its own copy. `seed` seeds the objective's draws (objective.py).
    """
    own = {name: value.to(shard.x.device, copy=True) for name, value in (buffers or {}).items()}
    return ShardObjective(
        architecture(spec),
        shard.x,
        shard.y,
        shard.task,
        l2=spec.l2,
        buffers=own,
        train_batch=spec.train_batch,
        augmentation=parse_augment(spec.augment),
        seed=seed,
        precision=spec.precision,
    )


def architecture(spec: ModelSpec) -> torch.nn.Module:
    """The model's module for `spec`, built once per thread (worker_state.WORKER).

    It only supplies the architecture: weights come from the flat vector through
    functional_call, so it lives on the meta device at no memory cost. functional_call swaps
    the module's parameters while it runs, hence one module per thread, never shared.
    """
    return WORKER.architecture(spec, _on_meta)


def _on_meta(spec: ModelSpec) -> torch.nn.Module:
    with torch.device("meta"):
        return build_model(spec)


# The validation split: a stratified, seeded slice of each training shard's rows held out.
# Chosen at train time, not by `dane prepare`, so every existing store trains with it. It is
# a pure function of the shard's labels, the fraction, the run's seed and the shard's index,
# and load_shard computes it from the rows it has just read: the worker (training), the
# reference and the driver's in-process loads therefore remove the same rows, and a caller
# that reads another [start, stop) (bench/scaling/introspect.py, the model check) gets a
# split of those rows, never a stale list of positions that may lie outside them.
PARTS = ("train", "val", "all")


def held_out_rows(y: np.ndarray, fraction: float, *, seed: int, index: int) -> np.ndarray:
    """Positions (sorted, into `y`) of the shard's validation rows.

    round(fraction * n) rows, at most n - 1 so a shard always keeps a row to train on, shared
    out among the classes in proportion to their counts (largest remainders; regression targets
    count as one class), each class's rows drawn at random from `seed` and the shard `index`.
    """
    n = len(y)
    total = min(round(fraction * n), n - 1)
    if fraction <= 0.0 or total <= 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([seed, index, 0x7A1])  # its own stream: no other draw shifts
    classes = np.unique(y) if np.issubdtype(y.dtype, np.integer) else np.zeros(1)
    members = [np.flatnonzero(y == c) for c in classes] if len(classes) > 1 else [np.arange(n)]
    counts = np.array([len(m) for m in members], dtype=np.int64)
    exact = total * counts / n
    quota = np.floor(exact).astype(np.int64)
    # Largest remainders first; ties to the lower class, so the result depends on nothing else.
    order = np.lexsort((np.arange(len(counts)), -(exact - quota)))
    quota[order[: total - int(quota.sum())]] += 1
    picked = [
        rng.choice(m, size=int(k), replace=False) for m, k in zip(members, quota, strict=True)
    ]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def part_positions(
    y: np.ndarray, part: str, fraction: float, *, seed: int, index: int
) -> np.ndarray:
    """Positions (sorted, into `y`) of the rows of `part`: "train" (held-out rows removed),
    "val" (only those rows) or "all" (every row, the split ignored)."""
    if part not in PARTS:
        raise ValueError(f"part is one of {', '.join(PARTS)} (got {part!r})")
    everything = np.arange(len(y), dtype=np.int64)
    if part == "all" or fraction <= 0.0:
        return everything if part != "val" else everything[:0]
    held = held_out_rows(y, fraction, seed=seed, index=index)
    if part == "val":
        return held
    keep = np.ones(len(y), dtype=bool)
    keep[held] = False
    return everything[keep]
