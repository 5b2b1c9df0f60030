"""Which worker holds each shard, and how (`--shard-memory`): decided once, on the driver.

place_shards is the last step of a run's plan, once its cluster is reached: each shard
pinned to a worker (round/aggregate.py's placement over the sorted worker addresses) and
the way every worker holds its shards and its scoring pieces.

auto is resolved here, from the shards' stored bytes and the smallest worker memory limit,
for the whole run: every shard (and a shard reloaded on another worker after a fault) is
held the same way, so the run's minibatches do not depend on which worker a shard lands on.
resident is refused, as one line, for a shard that cannot fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ...datasets.store import StoreInfo
from ..engine.plan import RunSetup
from ..engine.round.aggregate import shard_placement

# auto streams when a shard's stored bytes exceed this share of a worker's memory limit: the
# rest holds the model, its copies, the round's activations and the worker itself.
AUTO_STREAM_SHARE = 0.25
# Dask pauses a worker at 80% of its memory limit: a resident shard above that never fits.
RESIDENT_FITS_SHARE = 0.8
# What a CPU worker holds before any split: Python, Dask, torch and a first step's buffers
# (docs/results/memory/larger-than-memory.md: about 400 MiB). A worker's scoring pieces are
# held resident only in what that leaves below the pause threshold: on a 512 MiB worker a
# quarter of the limit (128 MiB) would have held 53 MiB of validation rows there, and the
# worker sat at 99% of its limit through every evaluation.
WORKER_BASE_BYTES = 400 * 2**20


def shard_bytes(store: StoreInfo, converted_to: str | None = None) -> list[int]:
    """Each training shard's features as stored (what a resident shard holds), or converted
    to the dtype `converted_to` (what a converted shard holds, when that is wider)."""
    row = row_bytes(store, converted_to)
    return [(stop - start) * row for start, stop in store.shards]


def row_bytes(store: StoreInfo, converted_to: str | None = None) -> int:
    """One row's features as stored, or converted to `converted_to` where that is wider."""
    itemsize = np.dtype(store.x_dtype).itemsize
    if converted_to is not None:
        itemsize = max(itemsize, np.dtype(converted_to).itemsize)
    return int(np.prod(store.sample_shape, dtype=np.int64)) * itemsize


def worker_memory_limit(scheduler_info: dict) -> int | None:
    """The smallest memory limit of the workers in the scheduler's identity (cluster_identity),
    in bytes; None if a worker has none (Dask's memory_limit 0)."""
    limits = [int(w.get("memory_limit") or 0) for w in scheduler_info["workers"].values()]
    return min(limits) if limits and all(limits) else None


def resolve_shard_memory(
    mode: str, store: StoreInfo, limit: int | None, dtype: str = "float32"
) -> tuple[str, str]:
    """(resident | converted | stream, why): `mode` resolved for the run (`dtype`: the run's);
    ValueError for resident or converted when a shard cannot fit in a worker's memory limit
    `limit`."""
    sizes = shard_bytes(store, converted_to=dtype if mode == "converted" else None)
    largest = int(np.argmax(sizes))
    size = f"shard {largest} holds {_size(sizes[largest])} of features"
    if limit is None:
        chosen = "resident" if mode == "auto" else mode
        return chosen, f"{mode}: {chosen} (the workers have no memory limit)"
    limit_text = f"the smallest worker memory limit is {_size(limit)}"
    if mode in ("resident", "converted") and sizes[largest] > RESIDENT_FITS_SHARE * limit:
        raise ValueError(
            f"{size}, more than {RESIDENT_FITS_SHARE:.0%} of a worker's memory limit "
            f"({_size(limit)}): it cannot be held {mode}; pass --shard-memory stream "
            "(or auto), or give the workers more memory"
        )
    if mode != "auto":
        return mode, f"{mode} ({size}; {limit_text})"
    chosen = "stream" if sizes[largest] > AUTO_STREAM_SHARE * limit else "resident"
    above = "above" if chosen == "stream" else "within"
    return chosen, (
        f"auto: {chosen} ({size}, {above} {AUTO_STREAM_SHARE:.0%} of a worker's memory; "
        f"{limit_text})"
    )


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 // 10 else f"{count / 2**10:.0f} KiB"


def resolve_split_memory(
    mode: str, store: StoreInfo, limit: int | None, *, train: str, shards_on_worker: int,
    val_fraction: float, dtype: str = "float32",
) -> tuple[dict[str, str], str]:  # fmt: skip
    """({"test": how, "val": how}, why): how a worker holds its pieces of the test split and
    of the held-out validation rows (those of its shards: round/scoring.py), beside
    `shards_on_worker` training shards held `train`.

    stream streams both; resident and converted hold both (refused, as one line, where the
    test split cannot fit); auto holds what fits in AUTO_STREAM_SHARE of the worker's limit
    (or in what the worker's own base leaves below Dask's pause threshold, if less) after
    its own resident shards, the validation rows first (scored with every evaluation, as
    the test split is, but smaller), and streams the rest.
    """
    # Bytes of features of the test split and of every shard's held-out validation rows, as
    # stored (or converted, as shard_bytes), times the worker's share: a worker scores the
    # pieces of its shards (round/scoring.py), their share of each.
    row = row_bytes(store, dtype if mode == "converted" else None)
    share = min(shards_on_worker / store.num_shards, 1.0)
    num_train = sum(stop - start for start, stop in store.shards)
    whole = {"test": store.num_test * row, "val": round(val_fraction * num_train) * row}
    sizes = {split: round(size * share) for split, size in whole.items()}
    holds = mode in ("resident", "converted")
    if holds and limit is not None and sizes["test"] > RESIDENT_FITS_SHARE * limit:
        raise ValueError(
            f"a worker's part of the test split holds {_size(sizes['test'])} of features, "
            f"more than {RESIDENT_FITS_SHARE:.0%} of its memory limit ({_size(limit)}): "
            f"it cannot be held {mode}; pass --shard-memory auto (or stream), or give the "
            "workers more memory"
        )
    if mode != "auto":
        return {"test": mode, "val": mode}, ""
    if limit is None:
        return {"test": "resident", "val": "resident"}, ""
    trained = max(shard_bytes(store)) * shards_on_worker if train == "resident" else 0
    left = min(AUTO_STREAM_SHARE * limit, RESIDENT_FITS_SHARE * limit - WORKER_BASE_BYTES)
    budget = left - trained
    held = {}
    for split in ("val", "test"):
        held[split] = "resident" if sizes[split] <= budget else "stream"
        budget -= sizes[split] if held[split] == "resident" else 0
    parts = [f"{split} {held[split]} ({_size(sizes[split])})" for split in ("test", "val")]
    return held, "; evaluation, a worker's part: " + ", ".join(
        parts if val_fraction > 0 else parts[:1]
    )


def place_shards(
    setup: RunSetup, scheduler_info: dict, announce: Callable[[str], None]
) -> tuple[RunSetup, list[str], str]:
    """The shards placed on the workers of the scheduler's identity (cluster_identity): (setup,
    placement, note).

    Each shard pinned to a worker (`placement`: sorted addresses, so it is reproducible), and
    `setup` with --shard-memory resolved for those workers and the smallest memory limit
    (worker_memory_limit), for the training shards and, on each worker, the test split and
    the validation rows. The choice with its reason is the `note` for config.toml (a comment:
    the setting itself stays as given, so auto resumes as auto), announced as a phrase for the
    run's first line (Callbacks.on_shards). ValueError where the cluster has no worker (a
    scheduler whose workers left, or were removed after a failed run on the same client)."""
    workers = sorted(scheduler_info["workers"])
    if not workers:
        raise ValueError(
            "the cluster has no workers to hold the shards; start workers on its scheduler "
            "(or a fresh client) and run again"
        )
    limit = worker_memory_limit(scheduler_info)
    config = setup.config
    chosen, why = resolve_shard_memory(config.shard_memory, setup.store, limit, config.dtype)
    held, evaluation = resolve_split_memory(
        config.shard_memory, setup.store, limit, train=chosen, dtype=config.dtype,
        shards_on_worker=-(-setup.store.num_shards // max(len(workers), 1)),
        val_fraction=config.val_fraction,
    )  # fmt: skip
    if chosen == "stream":
        why += "; minibatches from a window of chunks: other draws than a resident run's"
    announce(why + evaluation)
    held_setup = replace(
        setup,
        config=replace(config, shard_memory=chosen),
        test_memory=held["test"],
        val_memory=held["val"],
    )
    placement = shard_placement(setup.store.num_shards, workers)
    return held_setup, placement, f"shard_memory {why}{evaluation}"


def killed_loading(index: int, err: BaseException) -> str:
    """The line for a load task whose workers were killed again and again (Dask's
    KilledWorker: a nanny restarts a worker past its memory limit, and the scheduler gives
    up after distributed.scheduler.allowed-failures): the shard and the fix. Dask's words
    name the task, which tells a shard's load from the test split's."""
    what = "the test split" if "load_test" in str(err) else f"shard {index}"
    what = "the shards" if index < 0 else what  # every worker lost at once: which is unknown
    words = " ".join(str(err).split())
    words = words if len(words) <= 160 else words[:157] + "..."
    return (
        f"loading {what} killed its worker again and again ({words}): it does not fit in a "
        "worker's memory; pass --shard-memory stream, or give the workers more memory"
    )
