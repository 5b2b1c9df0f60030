"""One rank of `dane bench ddp`'s DistributedDataParallel run (ddp.py starts the processes).

Each rank joins the process group on 127.0.0.1 (or at DANE_DDP_MASTER, rank 0's address, where
`dane bench network` starts the ranks in network namespaces with `python -m`), loads the
shards the Dask pipeline would place on its worker, trains the model from the pipeline's
initial weights with DDP, times each step and the part of it spent waiting on the all-reduce,
and (rank 0) evaluates on the test split outside the training clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import statistics
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ...models.flat import flatten_parameters
from ...models.registry import ModelSpec
from ...pipeline.engine.round.shards import ShardData
from ...pipeline.engine.round.tasks import evaluate
from ...pipeline.setup.run_setup import prepare_run
from .comm_clock import CommClock, timed_allreduce_hook
from .plain_torch import (
    epoch_batches,
    initial_model,
    load_rows,
    load_test,
    minibatch_loss,
    rank_seed,
)
from .spec import (
    COLLECTIVE_TIMEOUT_S,
    DdpSpec,
    rank_shards,
    steps_per_epoch,
    total_steps,
)

# Where rank 0 listens; unset, 127.0.0.1. bench network sets it, and GLOO_SOCKET_IFNAME, which
# _pin_loopback leaves alone when it is set.
MASTER_ENV = "DANE_DDP_MASTER"


def rank_main(rank: int, spec: DdpSpec, port: int, out_dir: str) -> None:
    """A rank's process: train, then write rank<r>.json, or rank<r>.error with the traceback."""
    try:
        report = train_rank(rank, spec, port)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))
    except BaseException:
        Path(out_dir, f"rank{rank}.error").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def train_rank(rank: int, spec: DdpSpec, port: int) -> dict[str, Any]:
    """Join the process group, train for spec.epochs, return this rank's report."""
    device = _join_group(spec, rank, port)
    setup = prepare_run(spec.run_config())
    data = load_rows(setup, rank_shards(setup.store.num_shards, spec.workers, rank), rank, device)
    evaluator = _Evaluator(spec=setup.spec, test=load_test(setup, device)) if rank == 0 else None
    model = initial_model(setup.spec, spec.seed, device)
    clock = CommClock(cuda=device.type == "cuda")
    ddp = DistributedDataParallel(model, device_ids=None if device.index is None else [device])
    # Communication is timed inside DDP's own all-reduce (its default hook, wrapped), so it is
    # the real gradient synchronisation rather than a separate all-reduce of the same size.
    ddp.register_comm_hook(clock, timed_allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=spec.lr, momentum=spec.momentum)
    per_epoch = steps_per_epoch(setup, spec.workers, spec.batch_size)
    steps = total_steps(spec.epochs, per_epoch)
    rows = epoch_batches(len(data.y), spec.batch_size, per_epoch, rank_seed(spec.seed, rank))
    timings = _Timings()
    curve = [evaluator.point(0, per_epoch, model, timings, [])] if evaluator else []
    losses: list[float] = []
    started = time.perf_counter()
    for step, batch in zip(range(1, steps + 1), rows, strict=False):
        losses.append(_train_step(ddp, optimizer, data, batch, setup.spec.l2, clock, timings))
        if step % spec.eval_every == 0 or step == steps:
            if evaluator:
                timings.wall_s = time.perf_counter() - started
                curve.append(evaluator.point(step, per_epoch, model, timings, losses))
                losses = []
            # Untimed: all ranks resume together, so that no rank's next step counts rank 0's
            # evaluation as time spent waiting in the all-reduce.
            dist.barrier()
            if spec.stop_at_target and _stop_now(curve, spec.target, device):
                break
    timings.wall_s = time.perf_counter() - started
    return _report(rank, model, data, timings, curve, steps)


def _join_group(spec: DdpSpec, rank: int, port: int) -> torch.device:
    backend, kind = spec.backend_and_device()
    if kind == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # one core per rank, as each Dask worker has one thread
    _pin_loopback()
    dist.init_process_group(
        backend,
        init_method=f"tcp://{os.environ.get(MASTER_ENV, '127.0.0.1')}:{port}",
        rank=rank,
        world_size=spec.workers,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    return device


def _pin_loopback() -> None:
    # gloo and NCCL choose a network interface from the host name, which may resolve to a
    # public address; the ranks only talk to each other, so keep them on loopback.
    names = [name for _, name in socket.if_nameindex() if name.startswith("lo")]
    if names:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", names[0])
        os.environ.setdefault("NCCL_SOCKET_IFNAME", names[0])


@dataclass(kw_only=True)
class _Timings:
    step_s: list[float] = field(default_factory=list)
    comm_s: list[float] = field(default_factory=list)  # exposed: the step waits on it
    span_s: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    wall_s: float = 0.0  # since training started, evaluation included

    @property
    def train_wall_s(self) -> float:
        return sum(self.step_s)


def _train_step(
    ddp: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    data: ShardData,
    rows: torch.Tensor,
    l2: float,
    clock: CommClock,
    timings: _Timings,
) -> float:
    """One synchronous SGD step on `rows`; records its wall and communication time."""
    clock.reset()
    started = time.perf_counter()
    rows = rows.to(data.x.device)
    optimizer.zero_grad(set_to_none=True)
    loss = minibatch_loss(ddp, data, rows, l2)
    loss.backward()  # returns once DDP's all-reduce of every bucket has completed
    optimizer.step()
    if data.x.device.type == "cuda":
        torch.cuda.synchronize()
    timings.step_s.append(time.perf_counter() - started)
    timings.comm_s.append(clock.exposed())
    timings.span_s.append(clock.span())
    timings.calls.append(clock.calls)
    return float(loss.detach())


@dataclass(frozen=True, kw_only=True)
class _Evaluator:
    """Rank 0's test metrics, by the same function the Dask pipeline evaluates with."""

    spec: ModelSpec
    test: ShardData

    def point(
        self,
        step: int,
        per_epoch: int,
        model: torch.nn.Module,
        timings: _Timings,
        losses: list[float],
    ) -> dict[str, Any]:
        metrics = evaluate(self.spec, self.test, flatten_parameters(model))
        return {
            "step": step,
            "epoch": step / per_epoch,
            "comm_rounds": step,  # one gradient all-reduce per step (however many buckets)
            "train_wall_s": timings.train_wall_s,
            "wall_s": timings.wall_s,
            "train_loss": statistics.fmean(losses) if losses else None,
            "test_loss": metrics["loss"],
            "test_accuracy": metrics.get("accuracy"),
        }


def _stop_now(curve: list[dict[str, Any]], target: float, device: torch.device) -> bool:
    """Rank 0's last evaluation reached the target (the other ranks, whose curve is empty,
    learn it from rank 0)."""
    flag = torch.zeros(1, device=device)
    if curve:
        flag[0] = float((curve[-1]["test_accuracy"] or 0.0) >= target)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _report(
    rank: int,
    model: torch.nn.Module,
    data: ShardData,
    timings: _Timings,
    curve: list[dict[str, Any]],
    steps: int,
) -> dict[str, Any]:
    weights = flatten_parameters(model).cpu()
    compute = [s - c for s, c in zip(timings.step_s, timings.comm_s, strict=True)]
    return {
        "rank": rank,
        "steps": len(timings.step_s),
        "planned_steps": steps,
        "rows": int(data.y.shape[0]),
        "model_params": int(weights.numel()),
        # DDP may bucket differently on its first step; the usual count is the steady state.
        "allreduce_calls_per_step": Counter(timings.calls).most_common(1)[0][0],
        "allreduce_calls_seen": sorted(set(timings.calls)),
        "median_step_s": statistics.median(timings.step_s),
        "median_comm_s": statistics.median(timings.comm_s),
        "median_compute_s": statistics.median(compute),
        "median_comm_span_s": statistics.median(timings.span_s),
        "train_wall_s": timings.train_wall_s,
        "wall_s": timings.wall_s,
        # Equal hashes: DDP kept the replicas bit-for-bit identical.
        "weights_sha256": hashlib.sha256(weights.numpy().tobytes()).hexdigest(),
        "curve": curve,
    }


def _main(argv: list[str]) -> None:
    """`python -m dask_dane.bench.ddp.rank RANK PORT OUT_DIR SPEC_JSON`: one rank, its own
    process (bench network starts each rank in its namespace this way)."""
    rank, port, out_dir, spec_json = argv
    rank_main(int(rank), DdpSpec(**json.loads(spec_json)), int(port), out_dir)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
