"""DDP at m ranks for `dane bench shards`, exactly and cheaply: one process, batch m*B.

m DDP ranks that each draw B rows and all-reduce their mean gradients take the step of one
process drawing m*B rows: the same update, without m processes (bench/ddp runs the real
thing, with its all-reduce, at the ranks this machine holds). So every shard count gets its
DDP row at the DANE row's epoch budget, with the learning-rate rule of Goyal et al. (2017):
linear scaling (lr = m * the rank's lr) and a gradual warm-up from the rank's lr over the
first `WARMUP_EPOCHS` (their 5 of 90 epochs; 1 of our 10, the same share of a short run).

At large m that rule diverges here (issue 34: lr 0.4-1.6 at m = 8-32), and DDP's users tune
instead: `--ddp-grid-from M` runs, at every m >= M, the grid of GRID_SCALINGS x GRID_WARMUPS
x GRID_LR_FACTORS (linear or square-root scaling, a warm-up of 1 or 5 epochs, the scaled lr
halved, kept or doubled) and keeps the setting with the lowest final training loss: chosen
without looking at the test split, whose accuracy the row reports. The grid's rows are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...pipeline.setup.config import RunConfig
from ..ddp.single import SingleSpec, run_single

WARMUP_EPOCHS = 1.0
EVALUATIONS = 20  # test evaluations along a DDP row's run
GRID_SCALINGS = ("linear", "sqrt")
GRID_WARMUPS = (1.0, 5.0)
GRID_LR_FACTORS = (0.5, 1.0, 2.0)


def ddp_spec(
    config: RunConfig,
    ranks: int,
    epochs: float,
    rows: int,
    threads: int = 0,
    *,
    scaling: str = "linear",
    warmup: float = WARMUP_EPOCHS,
    lr_factor: float = 1.0,
) -> SingleSpec:
    """The one-process equivalent of `ranks` DDP ranks of the run's batch and lr: the lr
    scaled by m (linear) or sqrt(m), times `lr_factor`, warmed up over `warmup` epochs."""
    batch = ranks * config.batch_size
    steps = max(1, round(epochs * (rows // batch)))
    scale = ranks if scaling == "linear" else math.sqrt(ranks)
    return SingleSpec(
        store=str(config.store),
        model=config.model,
        epochs=epochs,
        batch_size=batch,
        lr=scale * config.local_lr * lr_factor,
        momentum=config.momentum,
        lr_schedule=config.lr_schedule,
        warmup_epochs=warmup if ranks > 1 else 0.0,
        warmup_lr=config.local_lr,
        eval_every=max(1, steps // EVALUATIONS),
        seed=config.seed,
        dtype=config.dtype,
        l2=config.l2,
        augment=config.augment,
        threads=threads,
        device="cpu" if config.device == "cpu" else "auto",  # the run's workers' device
    )


def epoch_budget(config: RunConfig, shards: int, rows: int) -> float:
    """Passes over the training set the DANE run's local steps make (its epoch budget)."""
    return config.rounds * config.local_steps * config.batch_size * shards / rows


def grid_settings() -> list[dict[str, Any]]:
    """The tuning grid's settings, as ddp_spec's keywords."""
    return [
        {"scaling": scaling, "warmup": warmup, "lr_factor": factor}
        for scaling in GRID_SCALINGS
        for warmup in GRID_WARMUPS
        for factor in GRID_LR_FACTORS
    ]


def final_train_loss(result: dict[str, Any]) -> float:
    """A run's last recorded training loss; inf where it diverged or recorded none."""
    losses = [p["train_loss"] for p in result["curve"] if p["train_loss"] is not None]
    return losses[-1] if losses and math.isfinite(losses[-1]) else math.inf


def ddp_row(
    config: RunConfig,
    ranks: int,
    rows: int,
    target: float,
    log: Callable[[str], None],
    threads: int = 0,
    grid: bool = False,
) -> dict[str, Any]:
    """Train the DDP equivalent of `ranks` ranks at the DANE run's epoch budget: with Goyal
    et al.'s rule, or (`grid`) the grid's setting with the lowest final training loss."""
    epochs = epoch_budget(config, ranks, rows)
    settings = grid_settings() if grid else [{}]
    tried = []
    for setting in settings:
        spec = ddp_spec(config, ranks, epochs, rows, threads, **setting)
        tried.append((spec, setting, run_single(spec, log=lambda line: None)))
    spec, setting, result = min(tried, key=lambda t: final_train_loss(t[2]))
    log(f"  DDP at {ranks} ranks: final test accuracy {result['final_test_accuracy']:.4f}")
    return {
        **_row(spec, ranks, rows, target, result),
        **({"setting": setting, "grid": [_grid_row(*t) for t in tried]} if grid else {}),
    }


def _grid_row(spec: SingleSpec, setting: dict[str, Any], result: dict[str, Any]) -> dict:
    return {**setting, "lr": spec.lr, "warmup_epochs": spec.warmup_epochs,
            "final_train_loss": final_train_loss(result),
            "final_test_accuracy": result["final_test_accuracy"]}  # fmt: skip


def _row(
    spec: SingleSpec, ranks: int, rows: int, target: float, result: dict[str, Any]
) -> dict[str, Any]:
    hit = next((p for p in result["curve"] if (p["test_accuracy"] or 0) >= target), None)
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
