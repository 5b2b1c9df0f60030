"""DDP at m ranks for `dane bench shards`, exactly and cheaply: one process, batch m*B.

m DDP ranks that each draw B rows and all-reduce their mean gradients take the step of one
process drawing m*B rows: the same update, without m processes (bench/ddp runs the real
thing, with its all-reduce, at the ranks this machine holds). So every shard count gets its
DDP row at the DANE row's epoch budget, with the learning-rate rule of Goyal et al. (2017):
linear scaling (lr = m * the rank's lr) and a gradual warm-up from the rank's lr over the
first `WARMUP_EPOCHS` (their 5 of 90 epochs; 1 of our 10, the same share of a short run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...pipeline import RunConfig
from ..ddp.single import SingleSpec, run_single

WARMUP_EPOCHS = 1.0
EVALUATIONS = 20  # test evaluations along a DDP row's run


def ddp_spec(
    config: RunConfig, ranks: int, epochs: float, rows: int, threads: int = 0
) -> SingleSpec:
    """The one-process equivalent of `ranks` DDP ranks of the run's batch and lr."""
    batch = ranks * config.batch_size
    steps = max(1, round(epochs * (rows // batch)))
    return SingleSpec(
        store=str(config.store),
        model=config.model,
        epochs=epochs,
        batch_size=batch,
        lr=ranks * config.local_lr,
        momentum=config.momentum,
        lr_schedule=config.lr_schedule,
        warmup_epochs=WARMUP_EPOCHS if ranks > 1 else 0.0,
        warmup_lr=config.local_lr,
        eval_every=max(1, steps // EVALUATIONS),
        seed=config.seed,
        dtype=config.dtype,
        l2=config.l2,
        augment=config.augment,
        threads=threads,
    )


def epoch_budget(config: RunConfig, shards: int, rows: int) -> float:
    """Passes over the training set the DANE run's local steps make (its epoch budget)."""
    return config.rounds * config.local_steps * config.batch_size * shards / rows


def ddp_row(
    config: RunConfig,
    ranks: int,
    rows: int,
    target: float,
    log: Callable[[str], None],
    threads: int = 0,
) -> dict[str, Any]:
    """Train the DDP equivalent of `ranks` ranks at the DANE run's epoch budget."""
    spec = ddp_spec(config, ranks, epoch_budget(config, ranks, rows), rows, threads)
    result = run_single(spec, log=lambda line: None)
    hit = next((p for p in result["curve"] if (p["test_accuracy"] or 0) >= target), None)
    log(f"  DDP at {ranks} ranks: final test accuracy {result['final_test_accuracy']:.4f}")
    return {
        "shards": ranks,
        "global_batch": spec.batch_size,
        "lr": spec.lr,
        "warmup_epochs": spec.warmup_epochs,
        "epochs": spec.epochs,
        "train_rows": rows,
        "steps": result["steps"],
        "final_test_accuracy": result["final_test_accuracy"],
        "best_test_accuracy": result["best_test_accuracy"],
        "steps_to_target": hit["step"] if hit else None,
        "images_to_target": hit["images"] if hit else None,
        "train_wall_s": result["train_wall_s"],
        "threads": result["threads"],
        # The bytes DDP all-reduces per step, for bench/scaling/time_to_accuracy.py (which
        # times one rank's step apart: this row runs on every core, a rank on one).
        "grad_bytes": result["model_params"] * torch.finfo(getattr(torch, spec.dtype)).bits // 8,
        "curve": [
            {"step": p["step"], "test_accuracy": p["test_accuracy"], "images": p["images"]}
            for p in result["curve"]
        ],
    }
