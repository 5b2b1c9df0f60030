"""`dane bench ddp`: the Dask pipeline's model and shards, trained by PyTorch DDP for comparison.

Real DistributedDataParallel, not a simulation: `workers` processes on 127.0.0.1 (gloo on CPU,
one thread each like the Dask workers; NCCL with one GPU per rank on CUDA). Everything that
defines the problem comes from the pipeline's own pieces, so that only the training method
differs from a Dask run on the same store:

- the model and its initial weights: run_setup.initial_weights under the run seed;
- the data: rank r holds the shards the Dask pipeline places on worker r (contiguous blocks),
  loaded and normalised by shards.load_shard;
- the loss: mean minibatch loss plus the store's L2 penalty, as ShardObjective.batch_loss;
- the test metrics: tasks.evaluate on rank 0, outside the training clock.

It is synchronous SGD with momentum, the same method as `dane train --algorithm sgd`, so the
Dask run that it mirrors is `DdpSpec.run_config()`.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from ...pipeline.engine.plan import RunSetup
from ...pipeline.setup.run_setup import prepare_run
from .rank import rank_main
from .spec import DdpSpec, allreduce_bytes_per_rank, rank_rows, steps_per_epoch

POLL_S = 0.2  # how often the parent looks for a dead rank
STOP_GRACE_S = 5.0


def run_ddp(spec: DdpSpec) -> dict[str, Any]:
    """Train with DDP on `spec.workers` local processes; return the figures and the curve.

    Parameters
    ----------
    spec
        The run; validated here (ValueError with the fix if it is bad).

    Returns
    -------
    dict
        Settings, communication counts, median step / communication / compute times (rank 0;
        communication is the part of the step spent waiting on the all-reduce, CommClock),
        the test-accuracy curve against steps and training wall time, time and rounds to
        `spec.target`, and each rank's step count and weight checksum.

    Raises
    ------
    RuntimeError
        If a rank fails; the other ranks are stopped, none is left waiting.
    """
    spec.validate()
    setup = prepare_run(spec.run_config())
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dane-ddp-") as tmp:
        _run_ranks(spec, Path(tmp))
        reports = [
            json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(spec.workers)
        ]
    return summarize(spec, setup, reports, process_wall_s=time.perf_counter() - started)


def _run_ranks(spec: DdpSpec, out_dir: Path) -> None:
    """Start one process per rank, wait for all; RuntimeError as soon as one fails."""
    context = mp.get_context("spawn")
    port = _free_port()
    processes = [
        context.Process(target=rank_main, args=(rank, spec, port, str(out_dir)), daemon=True)
        for rank in range(spec.workers)
    ]
    try:
        for process in processes:
            process.start()
        _wait(processes, out_dir)
    finally:
        _stop(processes)


def _wait(processes: list, out_dir: Path) -> None:
    # Polling rather than join(): a rank that dies leaves the others blocked in an all-reduce,
    # so waiting on any one of them could take until COLLECTIVE_TIMEOUT_S.
    while True:
        codes = [p.exitcode for p in processes]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank = failed[0]
            raise RuntimeError(
                f"DDP rank {rank} of {len(processes)} failed (exit code {codes[rank]}): "
                f"{_error_line(out_dir, rank)}"
            )
        if all(code == 0 for code in codes):
            return
        next(p for p in processes if p.exitcode is None).join(POLL_S)


def _error_line(out_dir: Path, rank: int) -> str:
    path = out_dir / f"rank{rank}.error"
    if not path.exists():
        return "it left no traceback (killed, e.g. out of memory?)"
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return lines[-1] if lines else "empty traceback"


def _stop(processes: list) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()


def _free_port() -> int:
    # The OS picks a free port; another process could take it before rank 0 binds it, which
    # is unlikely enough on one machine that a retry is not worth its code.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def summarize(
    spec: DdpSpec, setup: RunSetup, reports: list[dict], *, process_wall_s: float
) -> dict[str, Any]:
    """The result dict of run_ddp from the ranks' reports (rank 0 holds the curve)."""
    backend, device = spec.backend_and_device()
    lead = reports[0]
    per_epoch = steps_per_epoch(setup, spec.workers, spec.batch_size)
    grad_bytes = lead["model_params"] * torch.empty(0, dtype=getattr(torch, spec.dtype)).itemsize
    per_rank = allreduce_bytes_per_rank(grad_bytes, spec.workers)
    total = per_rank * spec.workers
    reached = [
        p for p in lead["curve"] if (p["test_accuracy"] or 0.0) >= spec.target and p["step"] > 0
    ]
    return {
        "spec": asdict(spec),
        "backend": backend,
        "device": device,
        "workers": spec.workers,
        "steps": lead["steps"],
        "steps_per_epoch": per_epoch,
        "rows_per_rank": rank_rows(setup, spec.workers),
        "model_params": lead["model_params"],
        "model_bytes": grad_bytes,
        "allreduce_calls_per_step": lead["allreduce_calls_per_step"],
        "bytes_per_step_per_rank": per_rank,
        "bytes_per_step_total": total,
        "median_step_s": lead["median_step_s"],
        "median_comm_s": lead["median_comm_s"],
        "median_compute_s": lead["median_compute_s"],
        "median_comm_span_s": lead["median_comm_span_s"],
        "train_wall_s": lead["train_wall_s"],
        "wall_s": lead["wall_s"],
        "process_wall_s": process_wall_s,
        # Bytes moved by all ranks together, as the Dask run's cum_comm_bytes counts them.
        "curve": [{**p, "cum_bytes": p["step"] * total} for p in lead["curve"]],
        "time_to_target_s": reached[0]["train_wall_s"] if reached else None,
        "rounds_to_target": reached[0]["comm_rounds"] if reached else None,
        "final_test_accuracy": lead["curve"][-1]["test_accuracy"],
        "ranks": [{k: v for k, v in r.items() if k != "curve"} for r in reports],
        "replicas_identical": len({r["weights_sha256"] for r in reports}) == 1,
    }
