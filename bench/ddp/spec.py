"""What `dane bench ddp`'s parent (ddp.py) and its ranks (ddp_rank.py) share: the run's spec
and how the store's shards split over the ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...pipeline.engine.plan import RunSetup
from ...pipeline.engine.round.aggregate import shard_placement
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run
from ..common.specs import option, run_config

DEVICES = ("auto", "cpu", "cuda")
# A rank blocked this long in a collective (a peer died) raises instead of waiting forever;
# the parent notices a dead rank much sooner (ddp.POLL_S) and stops the others.
COLLECTIVE_TIMEOUT_S = 300.0


@dataclass(frozen=True, kw_only=True)
class DdpSpec:
    """One DDP benchmark run; see `dane bench ddp --help`."""

    store: str = option(help="Store to train on (written by `dane prepare`).")
    model: str = option("lenet", help="Model.")
    # DDP ranks = processes on 127.0.0.1.
    workers: int = option(2, help="DDP ranks = Dask workers.")
    epochs: float = option(2.0, help="DDP: passes over the training set.")
    batch_size: int = option(64, help="Minibatch size per rank (per shard).")
    # --local-lr, as `dane train` names the local solver's (and sgd's) step size.
    lr: float = option(
        0.05,
        help="Learning rate (DDP, SGD, DANE's local solver).",
        flag="--local-lr",
        aliases=("--lr",),
    )
    momentum: float = option(
        0.9, help="Momentum.", flag="--local-momentum", aliases=("--momentum",)
    )
    eval_every: int = option(50, help="DDP: steps between evaluations (rank 0).")
    seed: int = option(0, help="Seed of data order and initial weights.")
    target: float = 0.88  # test accuracy whose first crossing is reported
    dtype: str = "float32"
    device: str = option("cpu", help="auto | cpu | cuda.")
    stop_at_target: bool = False  # stop at the first evaluation at or above `target`
    # Every row trains: DDP selects no model, and the mirrored `dane train` run and the
    # ranks' rows per epoch (rank_rows) count the store's shards whole.
    val_fraction: float = 0.0

    def validate(self) -> DdpSpec:
        """Return self, or raise ValueError naming the first bad setting and its fix."""
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1 (got {self.workers})")
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"--epochs must be a positive number (got {self.epochs}); e.g. 1")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"--local-lr must be a positive number (got {self.lr}); e.g. 0.05")
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
        setup = prepare_run(self.run_config())
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
        return run_config(self, algorithm="sgd", local_lr=self.lr)

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
