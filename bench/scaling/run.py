"""`dane bench scaling`: strong scaling over workers, with the round taken apart.

Data, shards and work stay fixed; only the number of workers changes. For each count W a
fresh cluster of W single-threaded workers trains `rounds` rounds (plus one warm-up round,
left out of the medians). Per round it records, beside the wall time:

- compute: the slowest worker's task time (the metrics' max_worker_compute_s);
- transfer: the longest total of incoming transfers on one worker (Dask's transfer logs)
  plus the driver's scatter;
- driver: the driver's own work (building and submitting the graph, gathering, metrics,
  checkpoint): the round's wall time outside waiting for the cluster;
- scheduler/graph overhead: the rest of the wait (task dispatch, idle workers);
- bytes moved by Dask (its transfer logs, plus what the driver scattered) against the
  pipeline's comm_bytes, and the bytes through the driver.

It also times the same rounds run by pipeline/engine/reference.py in this process with one thread
(the orchestration overhead of a 1-worker cluster), the fixed cost of a round on a tiny model
and tiny shards (`fixed_cost`), each worker's peak memory against its bound, and projects
round times onto real networks (network.py).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from dask.sizeof import sizeof

from ...pipeline.engine.round import wire  # noqa: F401  (true sizes of tensors for sizeof)
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import initial_weights, prepare_run
from ..common.specs import spec_record
from . import memory
from . import profile as round_profile
from .costs import fixed_cost, projection, reference_rounds
from .gloo import gloo_allgather_ms
from .profile import tasks_per_round
from .spec import ScalingSpec


@dataclass
class _RoundLog:
    """Rows and per-round Dask figures collected while a run trains."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    periods: list[float] = field(default_factory=list)
    transfers: list[dict[str, float]] = field(default_factory=list)
    # The driver's time in each round, as the engine reports it (Callbacks.on_timings).
    timings: dict[int, dict[str, float]] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)  # Dask's bytes per worker, last round
    client: Any = None  # the run's client: each round's transfers are read from it
    last_round: int = 0  # the run's last round, whose held bytes are read
    # When the previous round ended: perf_counter for its period, wall time for its transfers.
    since: list[float] = field(default_factory=lambda: [time.perf_counter(), time.time()])

    def on_start(self, dashboard: str, count: int) -> None:
        self.since[:] = [time.perf_counter(), time.time()]

    def on_round(self, row: dict[str, Any]) -> None:
        now, wall_now = time.perf_counter(), time.time()
        self.periods.append(now - self.since[0])
        self.transfers.append(_transfers_between(self.client, self.since[1], wall_now))
        self.rows.append(row)
        if row["round"] == self.last_round:  # the last round (left out of the medians)
            self.held.update(_held_after_rounds(self.client))
        self.since[:] = [time.perf_counter(), time.time()]

    def on_timings(self, round_index: int, timings: dict[str, float]) -> None:
        self.timings[round_index] = timings


def run_scaling(spec: ScalingSpec, log: Any = print) -> dict[str, Any]:
    """Every worker count, the reference and the fixed cost; returns the JSON-able result."""
    spec = spec.validate()
    workdir = Path(spec.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    setup = prepare_run(spec.config(1))
    model_bytes = sizeof(initial_weights(setup.spec, spec.run.seed))
    result: dict[str, Any] = {
        "spec": {**spec_record(spec), "networks": [asdict(n) for n in spec.networks]},
        "machine": _machine(),
        "model_bytes": model_bytes,
        "num_shards": setup.store.num_shards,
        "phases": len(setup.strategy.phases),
        "tasks_per_round": tasks_per_round(setup),
        "runs": [],
    }
    driver_before = _driver_rss()
    for workers in spec.workers:
        log(f"{workers} worker(s) ...")
        result["runs"].append(run_workers(spec, workers, model_bytes))
    # The driver (this process) holds a round's weights, state and metrics at a time.
    result["driver"] = {"rss_before": driver_before, "peak_rss": _driver_peak_rss()}
    base = result["runs"][0]["median"]["wall_s"] * spec.workers[0]
    for run in result["runs"]:
        run["speedup"] = base / run["median"]["wall_s"] / spec.workers[0]
        run["efficiency"] = run["speedup"] / run["workers"] * spec.workers[0]
    if spec.reference:
        log("reference (one process, one thread) ...")
        result["reference"] = reference_rounds(spec)
        one = next((r for r in result["runs"] if r["workers"] == 1), None)
        if one:
            result["overhead_ratio"] = one["median"]["wall_s"] / result["reference"]["median_s"]
    if spec.fixed_cost:
        log("fixed cost (tiny model, tiny shards) ...")
        result["fixed_cost"] = fixed_cost(spec, workdir, run_workers)
    result["projection"] = projection(result, spec)
    return result


def _driver_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _driver_peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _machine() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "load_average_at_start": os.getloadavg(),
    }


def run_workers(
    spec: ScalingSpec,
    workers: int,
    model_bytes: int,
    *,
    profile_round: int | None = None,
    hop_bytes: int = 0,
) -> dict[str, Any]:
    """Train on a fresh cluster of `workers` workers; medians after the warm-up round.

    With `profile_round`, also that round's task timeline and the cluster's cost of one
    dependent scheduling step (round_profile.py), under "profile"; `hop_bytes`: the hop
    passing that many bytes too (the benchmark's model).
    """
    from ...pipeline.engine.run.callbacks import Callbacks
    from ...pipeline.training import train

    config = spec.config(workers)
    with _cluster(config) as client:
        roundlog = _RoundLog(client=client, last_round=config.rounds)
        setup = prepare_run(config)
        bare = memory.worker_rss(client, setup)  # no data yet
        memory.start_trace(client)
        if profile_round:
            client.get_task_stream(count=0)  # the scheduler records tasks from the first call
        started = time.time()
        callbacks = Callbacks(
            on_start=roundlog.on_start, on_round=roundlog.on_round, on_timings=roundlog.on_timings
        )
        train(config, client=client, callbacks=callbacks)
        trace = memory.stop_trace(client)  # first: the peak below then covers all samples
        peak = memory.worker_peak_rss(client)
        profile = None
        if profile_round:  # Dask's task stream: each task's start and stop since `started`
            stream = client.get_task_stream(start=started)
            profile = {
                "hop": round_profile.hop_latency(client, payload_bytes=hop_bytes),
                "timeline": round_profile.round_timeline(stream, profile_round),
                # The torch collective's floor, measured beside the hop (bench/scaling/gloo.py).
                "gloo": gloo_allgather_ms(client, hop_bytes or model_bytes),
            }
    rounds = [
        _breakdown(row, roundlog.timings[row["round"]], period, transfer)
        for row, period, transfer in zip(
            roundlog.rows, roundlog.periods, roundlog.transfers, strict=True
        )
    ][1:-1]  # warm-up and the evaluated last round left out (validate: rounds >= 2)
    return {
        "workers": workers,
        "round_form": roundlog.rows[-1].get("round_form", "direct"),
        "oversubscribed": workers * config.threads_per_worker > (os.cpu_count() or 1),
        "rounds": rounds,
        "median": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
        "memory": memory.check(setup, workers, bare, peak, model_bytes, roundlog.held),
        "memory_trace": trace,
        **({"profile": profile} if profile else {}),
    }


def _cluster(config: RunConfig):  # type: ignore[no-untyped-def]
    from ...pipeline.launchers.cluster import make_client

    return make_client(config)


def _held_after_rounds(client: Any, timeout_s: float = 10.0) -> dict[str, int]:
    """Each worker's held bytes once the scheduler has let go of every round's keys (they
    leave a moment after the last round is recorded): the run's data alone, the shards and
    the test split, which the run holds until it returns."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        keys = client.run_on_scheduler(_task_keys)
        if all(key.startswith("load_") for key in keys):
            break
        time.sleep(0.02)
    return client.run(_held_bytes)


def _task_keys(dask_scheduler: Any = None) -> list[str]:
    return [str(key) for key in dask_scheduler.tasks]


def _held_bytes(dask_worker: Any = None) -> int:
    """Bytes of the data a worker holds, as Dask sizes it (engine/round/wire.py's sizeof)."""
    return int(dask_worker.state.nbytes)


def _transfers_between(client: Any, start: float, stop: float) -> dict[str, float]:
    """Dask's incoming-transfer logs of all workers between two wall-clock times."""
    per_worker = client.run(_incoming_transfers, start, stop)
    seconds = [w["seconds"] for w in per_worker.values()]
    return {
        "bytes": sum(w["bytes"] for w in per_worker.values()),
        "count": sum(w["count"] for w in per_worker.values()),
        "max_worker_s": max(seconds) if seconds else 0.0,
    }


def _incoming_transfers(start: float, stop: float, dask_worker: Any = None) -> dict[str, float]:
    entries = [
        e for e in dask_worker.transfer_incoming_log if start <= e["start"] and e["stop"] <= stop
    ]
    return {
        "bytes": float(sum(e["total"] for e in entries)),
        "count": float(len(entries)),
        "seconds": float(sum(e["duration"] for e in entries)),
    }


def _breakdown(
    row: dict[str, Any], timings: dict[str, float], period: float, transfer: dict[str, float]
) -> dict[str, float]:
    """One round's wall time taken apart (seconds) and its bytes; `timings` are the driver's
    (Callbacks.on_timings). The driver scatters the weights only where the chain of rounds
    starts, the warm-up round, which the medians leave out."""
    compute = row["max_worker_compute_s"]
    moved = transfer["max_worker_s"]
    waited, scattered = timings["wait_s"], timings["scatter_s"]
    return {
        "wall_s": period,
        "compute_s": compute,
        "transfer_s": moved + scattered,
        "overhead_s": max(0.0, waited - compute - moved),
        "driver_s": max(0.0, period - waited - scattered),
        "comm_bytes": row["comm_bytes"],
        "dask_bytes": transfer["bytes"],
        "dask_transfers": transfer["count"],
        "images": row.get("images") or 0,  # rows trained on: full passes and local steps
    }
