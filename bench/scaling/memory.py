"""Worker memory in the scaling benchmark: bare footprint, peak, and the bound they must meet.

Bound per worker (issue 5): the bytes of the shards it holds (and of the test split, which
lives on the first worker) + 20 x the model's bytes + the bare worker's footprint, measured
in the same run after the cluster started and before any shard was loaded. "Bare" is a
worker that has read two rows of the store and run the model and an optimizer step once, in
a task (on the thread that runs tasks), and has received and sent a model-sized tensor:
one-time set-up on first use (the modules torch's optimizers import, about 100 MiB; kernels;
allocator arenas; Dask's communication buffers) belongs to the process, not to the data or
to copies of the model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...pipeline.engine.round.aggregate import shard_placement
from ...pipeline.engine.run.bounded import cluster_identity

MODEL_COPIES = 20
# What a worker process holds beyond its data, the model copies and the bare footprint while
# it runs tasks, as traced (`trace_summary`; docs/results.md, Memory): loading shards costs
# about 40 MiB more than their bytes (zarr's codecs and decode buffers), and Dask's message
# buffers and allocator arenas take 9-12 MiB; 80 MiB in all, a measured allowance.
PROCESS_SLACK = 80 * 2**20
TRACE_INTERVAL_S = 0.01  # RSS samples on each worker while a run trains


def _rss(dask_worker: Any = None) -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _warm_rss(spec: Any, device: str, load_args: dict, dask_worker: Any = None) -> int:
    """Read two rows of the store, run the model and an optimizer step; then read the RSS."""
    import torch

    from ...models.registry import build_model
    from ...pipeline.engine.round.shards import resolve_device
    from .introspect import read_first_rows

    read_first_rows(load_args)  # zarr's I/O thread and codecs

    where = resolve_device(device)
    model = build_model(spec).to(where)
    rows = torch.randn(2, *spec.sample_shape, dtype=getattr(torch, spec.dtype), device=where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # its first step imports a lot
    model(rows).sum().backward()
    optimizer.step()
    del model, rows, optimizer
    return _rss()


def _peak(dask_worker: Any = None) -> dict[str, int]:
    import resource

    import torch

    peak = {"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda"] = int(torch.cuda.max_memory_allocated())
    return peak


def worker_rss(client: Any, setup: Any) -> dict[str, int]:
    """Resident memory of each worker, by address, once it has used the libraries once."""
    from ...pipeline.setup.run_setup import initial_weights

    workers = sorted(cluster_identity(client)["workers"])
    args = (setup.spec, setup.config.device, setup.shard_args(0))
    for w in workers:  # a model-sized tensor there and back through Dask's comms
        sent = client.scatter(initial_weights(setup.spec, 0), workers=[w], hash=False)
        client.gather(sent)
        del sent
    warm = [
        client.submit(_warm_rss, *args, workers=[w], allow_other_workers=False, pure=False)
        for w in workers
    ]
    return dict(zip(workers, client.gather(warm), strict=True))


def _start_trace(interval: float, dask_worker: Any = None) -> None:
    """Sample this worker's RSS, and the tasks it is running, every `interval` seconds."""
    import threading
    import time

    import psutil

    process, samples, stop = psutil.Process(), [], threading.Event()

    def sample() -> None:
        while not stop.wait(interval):
            running = [str(ts.key) for ts in list(dask_worker.state.executing)]
            samples.append((time.time(), process.memory_info().rss, running))

    dask_worker._dane_rss_trace = (samples, stop)
    threading.Thread(target=sample, name="dane-rss-trace", daemon=True).start()


def _stop_trace(dask_worker: Any = None) -> list[tuple[float, int, list[str]]]:
    samples, stop = dask_worker._dane_rss_trace
    stop.set()
    del dask_worker._dane_rss_trace
    return samples


def start_trace(client: Any) -> None:
    """Start sampling every worker's RSS (stop_trace ends it and summarises)."""
    client.run(_start_trace, TRACE_INTERVAL_S)


def stop_trace(client: Any) -> dict[str, dict[str, Any]]:
    """Per worker: where its RSS went, from the samples since start_trace (trace_summary)."""
    return {address: trace_summary(s) for address, s in client.run(_stop_trace).items()}


def trace_summary(samples: list[tuple[float, int, list[str]]]) -> dict[str, Any]:
    """RSS at the start, after the shard loads, over the run's first round task, per round.

    Round tasks name their round second (`local_grad-3-...`); the loads, named `load_...`,
    carry a shard index there instead. MiB throughout.
    """
    mib = 2**-20
    start = samples[0][1] if samples else 0
    loads = [rss for _, rss, keys in samples if any(k.startswith("load_") for k in keys)]
    by_round: dict[int, int] = {}
    first_key, first_rss = None, 0
    for _, rss, keys in samples:
        for key in keys:
            round_index = _round_of(key)
            if round_index is None:
                continue
            by_round[round_index] = max(by_round.get(round_index, 0), rss)
            first_key = first_key or key
            if key == first_key:
                first_rss = max(first_rss, rss)
    return {
        "start_mib": start * mib,
        "after_loads_mib": max(loads, default=start) * mib,
        "first_round_task_mib": first_rss * mib,
        "max_by_round_mib": {str(t): rss * mib for t, rss in sorted(by_round.items())},
        "peak_mib": max((rss for _, rss, _ in samples), default=0) * mib,
    }


def _round_of(key: str) -> int | None:
    parts = key.split("-")
    if key.startswith("load_") or len(parts) < 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def worker_peak_rss(client: Any) -> dict[str, dict[str, int]]:
    """Each worker's peak resident memory (and peak GPU allocation) since it started."""
    return client.run(_peak)


def data_bytes(setup: Any, workers: int) -> list[int]:
    """Bytes of the training rows (and their pieces of the test split) that each of `workers`
    workers holds: piece i of the test split lies beside shard i (round/scoring.py)."""
    store = setup.store
    # Features as workers hold them (rows/features.py): as stored when that is narrower than
    # the run's dtype (uint8 images), else converted; in the run's dtype with --shard-memory
    # converted; streamed, only their labels (and a few chunks); labels as int64.
    stored, wide = np.dtype(store.x_dtype).itemsize, np.dtype(setup.config.dtype).itemsize
    item = {"converted": max(stored, wide), "stream": 0}.get(
        setup.config.shard_memory, min(stored, wide)
    )
    row = math.prod(store.sample_shape) * item + 8
    placement = shard_placement(store.num_shards, list(range(workers)))
    held = [0] * workers
    pieces = store.num_shards
    for i, ((start, stop), worker) in enumerate(zip(store.shards, placement, strict=True)):
        piece = round((i + 1) * store.num_test / pieces) - round(i * store.num_test / pieces)
        held[worker] += (stop - start + piece) * row
    return held


def check(
    setup: Any,
    workers: int,
    bare: dict[str, int],
    peak: dict[str, dict[str, int]],
    model_bytes: int,
    dask_held: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Per worker (address order): bare, peak, data bytes, bound and whether peak is within;
    `dask_held`: what Dask itself counted on each worker after the rounds (a cross-check of the
    data bytes, which are computed from the store)."""
    from ...pipeline.engine.round.activations import activation_bytes_per_row
    from ...pipeline.engine.round.shards import architecture

    held = data_bytes(setup, workers)
    x = torch.empty((1, *setup.spec.sample_shape), dtype=getattr(torch, setup.config.dtype))
    model = architecture(setup.spec)
    num_params = sum(p.numel() for p in model.parameters())
    # A minibatch's activations kept for the backward pass: they scale with --batch-size,
    # not with the model, so the bound cannot cover them for every batch size.
    batch = activation_bytes_per_row(model, x, num_params)
    batch *= setup.config.batch_size
    rows = []
    for address, data in zip(sorted(peak), held, strict=False):
        # A worker its nanny restarted has a new address: its bare footprint was not taken.
        restarted = address not in bare
        bare_bytes = bare.get(address, min(bare.values(), default=0))
        bound = data + MODEL_COPIES * model_bytes + bare_bytes
        extended = bound + batch + PROCESS_SLACK
        rows.append(
            {
                "worker": address,
                "bare_mib": bare_bytes / 2**20,
                "restarted": restarted,
                "peak_mib": peak[address]["rss"] / 2**20,
                "data_mib": data / 2**20,
                "dask_held_mib": (dask_held or {}).get(address, 0) / 2**20,
                "model_copies_mib": MODEL_COPIES * model_bytes / 2**20,
                "bound_mib": bound / 2**20,
                "within": peak[address]["rss"] <= bound,
                "batch_activations_mib": batch / 2**20,
                "extended_bound_mib": extended / 2**20,
                "within_extended": peak[address]["rss"] <= extended,
                "cuda_peak_mib": peak[address].get("cuda", 0) / 2**20,
            }
        )
    return rows
