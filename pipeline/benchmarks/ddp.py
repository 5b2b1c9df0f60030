"""`dane bench ddp`: the Dask pipeline's model and shards, trained by PyTorch DDP for comparison.

Real DistributedDataParallel, not a simulation: `workers` processes on 127.0.0.1 (gloo on CPU,
one thread each like the Dask workers; NCCL with one GPU per rank on CUDA). Everything that
defines the problem comes from the pipeline's own pieces, so that only the training method
differs from a Dask run on the same store:

- the model and its initial weights: setup.initial_weights under the run seed;
- the data: rank r holds the shards the Dask pipeline places on worker r (contiguous blocks),
  loaded and normalised by tasks.load_shard;
- the loss: mean minibatch loss plus the store's L2 penalty, as ShardObjective.batch_loss;
- the test metrics: tasks.evaluate on rank 0, outside the training clock.

It is synchronous SGD with momentum, the same method as `dane train --algorithm sgd`, so the
Dask run that it mirrors is `DdpSpec.run_config()`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import statistics
import tempfile
import time
import traceback
import typing
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from dask_dane.models.flat import flatten_parameters, unflatten
from dask_dane.models.registry import ModelSpec, build_model
from dask_dane.pipeline.aggregate import shard_placement
from dask_dane.pipeline.config import RunConfig
from dask_dane.pipeline.setup import RunSetup, initial_weights, prepare_run
from dask_dane.pipeline.tasks import ShardData, evaluate, load_shard

DEVICES = ("auto", "cpu", "cuda")
# A rank blocked this long in a collective (a peer died) raises instead of waiting forever;
# the parent notices a dead rank much sooner (POLL_S) and stops the others.
COLLECTIVE_TIMEOUT_S = 300.0
POLL_S = 0.2
STOP_GRACE_S = 5.0


@dataclass(frozen=True, kw_only=True)
class DdpSpec:
    """One DDP benchmark run; see `dane bench ddp --help`."""

    store: str  # a store written by `dane prepare`
    model: str = "lenet"
    workers: int = 2  # DDP ranks = processes on 127.0.0.1
    epochs: float = 2.0  # passes over the training set (fractional allowed)
    batch_size: int = 64  # per rank
    lr: float = 0.05
    momentum: float = 0.9
    eval_every: int = 50  # steps between test evaluations (rank 0)
    seed: int = 0
    target: float = 0.88  # test accuracy whose first crossing is reported
    dtype: str = "float32"
    device: str = "auto"  # auto | cpu | cuda

    def validate(self) -> DdpSpec:
        """Return self, or raise ValueError naming the first bad setting and its fix."""
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1 (got {self.workers})")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"--epochs must be a positive number (got {self.epochs}); e.g. 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"--lr must be a positive number (got {self.lr}); e.g. 0.05")
        if not (math.isfinite(self.target) and 0 < self.target <= 1):
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.target})")
        if self.device not in DEVICES:
            raise ValueError(f"unknown --device {self.device!r}; choose one of: auto, cpu, cuda")
        if self.device == "cuda" and _gpus() == 0:
            raise ValueError("--device cuda but torch sees no GPU; pass --device cpu or auto")
        if self.device == "cuda" and _gpus() < self.workers:
            raise ValueError(
                f"--device cuda needs one GPU per rank (NCCL refuses two ranks on one GPU) and "
                f"{_gpus()} are visible for --workers {self.workers}; pass --workers {_gpus()} "
                "or fewer, or --device cpu"
            )
        # batch size, momentum, eval interval, dtype, store and model: checked as for `dane train`
        setup = prepare_run(self.run_config().validate())
        if setup.store.num_shards < self.workers:
            raise ValueError(
                f"store {self.store} has {setup.store.num_shards} shards, too few for --workers "
                f"{self.workers} (each rank holds the shards i mod workers); pass --workers "
                f"{setup.store.num_shards} or fewer, or prepare the store with more --shards"
            )
        if steps_per_epoch(setup, self.workers, self.batch_size) < 1:
            smallest = min(rank_rows(setup, self.workers))
            raise ValueError(
                f"--batch-size {self.batch_size} exceeds the {smallest} rows of the smallest "
                f"rank; pass --batch-size {smallest} or less"
            )
        return self

    def run_config(self) -> RunConfig:
        """The `dane train` run this mirrors: synchronous SGD on the same store and shards."""
        return RunConfig(
            store=self.store,
            algorithm="sgd",
            model=self.model,
            workers=self.workers,
            batch_size=self.batch_size,
            local_lr=self.lr,
            momentum=self.momentum,
            eval_every=self.eval_every,
            seed=self.seed,
            dtype=self.dtype,
        )

    def backend_and_device(self) -> tuple[str, str]:
        """("nccl", "cuda") with a GPU per rank (auto or cuda), else ("gloo", "cpu")."""
        if self.device == "cuda" or (self.device == "auto" and _gpus() >= self.workers):
            return "nccl", "cuda"
        return "gloo", "cpu"


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def rank_shards(num_shards: int, workers: int, rank: int) -> list[int]:
    """The shards rank `rank` holds: the Dask pipeline's placement (aggregate.shard_placement)."""
    placement = shard_placement(num_shards, list(range(workers)))
    return [i for i, holder in enumerate(placement) if holder == rank]


def rank_rows(setup: RunSetup, workers: int) -> list[int]:
    """Training rows per rank."""
    shards = setup.store.shards
    return [
        sum(shards[i][1] - shards[i][0] for i in rank_shards(len(shards), workers, rank))
        for rank in range(workers)
    ]


def steps_per_epoch(setup: RunSetup, workers: int, batch_size: int) -> int:
    """Steps that every rank can take per pass over its rows: the smallest rank sets it."""
    return min(rank_rows(setup, workers)) // batch_size


def total_steps(epochs: float, per_epoch: int) -> int:
    return max(1, round(epochs * per_epoch))


def allreduce_bytes_per_rank(grad_bytes: int, workers: int) -> float:
    """Bytes one rank sends per all-reduce of `grad_bytes` in a ring all-reduce.

    Reduce-scatter then all-gather, each W-1 transfers of 1/W of the buffer: 2(W-1)/W * bytes
    per rank. It is the standard cost model; gloo and NCCL may pick another algorithm for a
    given size, with the same or similar traffic. It does not depend on DDP's bucketing.
    """
    return 2 * (workers - 1) * grad_bytes / workers


# ---------------------------------------------------------------------------------------------
# The parent: spawn the ranks, watch them, assemble the result


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


# ---------------------------------------------------------------------------------------------
# One rank


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
    data = _load_rows(setup, rank, spec.workers, device)
    evaluator = _Evaluator(spec=setup.spec, test=_load_test(setup, device)) if rank == 0 else None
    model = _initial_model(setup.spec, spec.seed, device)
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
        init_method=f"tcp://127.0.0.1:{port}",
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


def rank_seed(seed: int, rank: int) -> int:
    """Independent, reproducible minibatch streams per (run seed, rank)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def epoch_batches(
    num_rows: int, batch_size: int, per_epoch: int, seed: int
) -> Iterator[torch.Tensor]:
    """Row indices of each step: a fresh permutation per epoch, cut into per_epoch batches.

    A rank with more rows than per_epoch * batch_size leaves the rest of that epoch's
    permutation unused, so every rank takes the same number of steps.
    """
    rng = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(num_rows, generator=rng)
        for i in range(per_epoch):
            yield order[i * batch_size : (i + 1) * batch_size]


def _load_rows(setup: RunSetup, rank: int, workers: int, device: torch.device) -> ShardData:
    """This rank's shards, concatenated (index is the rank here, not a shard)."""
    shards = [
        load_shard(**setup.shard_args(i))
        for i in rank_shards(setup.store.num_shards, workers, rank)
    ]
    return ShardData(
        index=rank,
        x=torch.cat([s.x for s in shards]).to(device),
        y=torch.cat([s.y for s in shards]).to(device),
        task=setup.store.task,
    )


def _load_test(setup: RunSetup, device: torch.device) -> ShardData:
    test = load_shard(**setup.test_args())
    return ShardData(index=-1, x=test.x.to(device), y=test.y.to(device), task=test.task)


def _initial_model(spec: ModelSpec, seed: int, device: torch.device) -> torch.nn.Module:
    """The architecture holding exactly initial_weights(spec, seed), as every Dask run starts."""
    weights = initial_weights(spec, seed)
    model = build_model(spec)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(unflatten(model, weights)[name])
    return model.to(device)


class CommClock:
    """Launch and completion marks of the all-reduces DDP runs in one step (the hook's state).

    Marks are perf_counter() on CPU, and CUDA events on GPU, where a future's callback may run
    once the work is queued rather than done; events place both marks on the GPU's timeline.
    """

    def __init__(self, *, cuda: bool) -> None:
        self.cuda = cuda
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.starts: list[Any] = []
        self.ends: list[Any] = []

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def exposed(self) -> float:
        """Seconds from the last bucket's launch to the last completion (after a sync).

        The last bucket launches when backward's compute ends, so this is the time the step
        waits on communication: the transfer, plus waiting for a slower rank to get there.
        DDP puts the last layers' gradients in a first, small bucket (1 MiB) that overlaps
        the rest of backward: lenet has 2 buckets, small-cnn 1.
        """
        return self._between(self.starts[-1], self.ends[-1]) if self.starts else 0.0

    def span(self) -> float:
        """Seconds from the first launch to the last completion: overlapped compute included."""
        return self._between(self.starts[0], self.ends[-1]) if self.starts else 0.0

    def _between(self, start: Any, end: Any) -> float:
        # Launches are appended in launch order and completions in completion order.
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


def timed_allreduce_hook(
    clock: CommClock, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (mean) of one gradient bucket, marked at launch and completion."""
    clock.calls += 1
    clock.starts.append(clock.mark())

    def done(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        clock.ends.append(clock.mark())
        return future.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


# DDP checks a hook's annotations as objects, and `from __future__ import annotations` leaves
# them as strings: resolve them.
timed_allreduce_hook.__annotations__ = typing.get_type_hints(timed_allreduce_hook)


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
    loss = _loss(ddp(data.x[rows]), data.y[rows], data.task) + _penalty(ddp.module, l2)
    loss.backward()  # returns once DDP's all-reduce of every bucket has completed
    optimizer.step()
    if data.x.is_cuda:
        torch.cuda.synchronize()
    timings.step_s.append(time.perf_counter() - started)
    timings.comm_s.append(clock.exposed())
    timings.span_s.append(clock.span())
    timings.calls.append(clock.calls)
    return float(loss.detach())


def _loss(out: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """Mean minibatch loss, as ShardObjective.batch_loss computes it for the Dask run."""
    if task == "classification":
        return F.cross_entropy(out, y)
    return F.mse_loss(out.reshape(y.shape), y)


def _penalty(model: torch.nn.Module, l2: float) -> torch.Tensor | float:
    """lambda*||w||^2, the store's L2 term that every shard's loss carries (objective.py)."""
    return l2 * sum(p.pow(2).sum() for p in model.parameters()) if l2 else 0.0


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
