"""`dane bench single`: the same model on the same data in one process, plain PyTorch.

No Dask and no distribution: the "one machine" row every comparison needs. Only the training
method differs from a `dane train` run on the same store: the data are the store's training
rows (every shard, loaded and normalised as the pipeline does), the initial weights the
pipeline's (run_setup.initial_weights under --seed), the loss the pipeline's (minibatch loss
plus the store's L2 term); the optimizer is SGD with momentum at --lr times --lr-schedule's
factor over the steps; test metrics are tasks.evaluate's, taken outside the training clock.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ...models.flat import flatten_parameters
from ...pipeline.algorithms.parts.schedule import lr_factor
from ...pipeline.engine.round.augment import parse_augment
from ...pipeline.engine.round.tasks import evaluate
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run
from ..common.output import percent
from ..common.specs import option, run_config
from .plain_torch import (
    epoch_batches,
    initial_model,
    load_rows,
    load_test,
    minibatch_loss,
    rank_seed,
)


@dataclass(frozen=True, kw_only=True)
class SingleSpec:
    """One single-process run; see `dane bench single --help`."""

    store: str = option(help="Store to train on (written by `dane prepare`).")
    model: str = option("lenet", help="Model.")
    epochs: float = option(2.0, help="Passes over the training set.")
    batch_size: int = option(64, help="Minibatch size.")
    lr: float = option(  # --local-lr: `dane train`'s name for SGD's step size
        0.05, help="Learning rate (SGD with momentum).", flag="--local-lr", aliases=("--lr",)
    )
    # The local solver's settings share `dane train`'s --local- prefix; the former names stay.
    momentum: float = option(
        0.9, help="Momentum.", flag="--local-momentum", aliases=("--momentum",)
    )
    # Over the steps, as --local-lr-schedule spans a run's rounds.
    lr_schedule: str = option(
        "constant",
        help="constant | cosine | step, over the steps.",
        flag="--local-lr-schedule",
        aliases=("--lr-schedule",),
    )
    # Goyal et al. (2017)'s gradual warm-up: the lr rises linearly from warmup_lr to --local-lr
    # over the first warmup_epochs (0: none), as a large batch m*B at m times the lr needs.
    warmup_epochs: float = option(
        0.0, help="Raise the lr linearly from --warmup-lr over these epochs."
    )
    warmup_lr: float = option(0.0, help="The lr the warm-up starts from.")
    eval_every: int = option(50, help="Steps between evaluations.")
    seed: int = option(0, help="Seed of data order and initial weights.")
    targets: tuple[float, ...] = (0.88,)  # test accuracies whose first crossing is reported
    threads: int = option(0, help="Torch threads; 0: every core.")
    # auto: the GPU where torch sees one (the DDP rows of `dane bench shards` follow the run's
    # --device), so a one-process row on a GPU machine is timed where the workers compute.
    device: str = option("cpu", help="cpu | cuda | auto (a GPU where torch sees one).")
    dtype: str = "float32"
    # Every row trains (no validation split): one process selects no model, and --epochs
    # counts passes over the store's training rows, as the DDP rows and the runs beside it.
    val_fraction: float = 0.0
    # The L2 penalty lambda, as `dane train --l2` (None: the store's).
    l2: float | None = option(None, help="L2 penalty lambda (default: the store's, else 0).")
    augment: str = option(
        "", help="Random flips / crops of each minibatch (as `dane train --augment`): "
        "flip | crop=P | both."
    )  # fmt: skip

    def validate(self) -> SingleSpec:
        if not (math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"--epochs must be a positive number (got {self.epochs})")
        if not self.targets or not all(0 < t <= 1 for t in self.targets):
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.targets})")
        if self.threads < 0:
            raise ValueError(f"--threads must be 0 (every core) or more (got {self.threads})")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"--device must be cpu, cuda or auto (got {self.device!r})")
        if self.warmup_epochs < 0 or not 0 <= self.warmup_lr <= self.lr:
            raise ValueError(
                f"--warmup-epochs must be 0 or more and --warmup-lr within [0, --local-lr] (got "
                f"{self.warmup_epochs} and {self.warmup_lr})"
            )
        self.run_config()  # store, model, batch size, lr, schedule: as `dane train` checks them
        return self

    def run_config(self) -> RunConfig:
        """The `dane train` settings this mirrors (for the store, the model and the weights)."""
        return run_config(self, algorithm="sgd", local_lr=self.lr, workers=1, device="cpu")

    def torch_device(self) -> torch.device:
        """Where the one process trains: --device, auto resolved by what torch sees."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def run_single(spec: SingleSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train in this process; returns the curve, the time and images to each target."""
    spec.validate()
    setup = prepare_run(spec.run_config())
    threads, before = spec.threads or os.cpu_count() or 1, torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _train(spec, setup, threads, log)
    finally:
        torch.set_num_threads(before)


def _train(spec: SingleSpec, setup: Any, threads: int, log: Callable[[str], None]) -> dict:
    device = spec.torch_device()
    data = load_rows(setup, list(range(setup.store.num_shards)), 0, device)
    test = load_test(setup, device)
    model = initial_model(setup.spec, spec.seed, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    per_epoch = len(data.y) // spec.batch_size
    steps = max(1, round(spec.epochs * per_epoch))
    batches = epoch_batches(len(data.y), spec.batch_size, per_epoch, rank_seed(spec.seed, 0))
    augmentation = parse_augment(spec.augment)
    augment_rng = torch.Generator().manual_seed(rank_seed(spec.seed, 1))
    clock, losses = 0.0, []
    curve = [_point(setup, test, model, 0, per_epoch, spec.batch_size, clock, losses)]
    for step, rows in zip(range(1, steps + 1), batches, strict=False):
        started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = step_lr(spec, step, steps, per_epoch)
        optimizer.zero_grad(set_to_none=True)
        loss = minibatch_loss(model, data, rows, setup.spec.l2, augment=(augmentation, augment_rng))
        loss.backward()
        optimizer.step()
        clock += time.perf_counter() - started
        losses.append(float(loss.detach()))
        if step % spec.eval_every == 0 or step == steps:
            point = _point(setup, test, model, step, per_epoch, spec.batch_size, clock, losses)
            curve.append(point)
            losses = []
            log(f"step {step}/{steps}: test accuracy {point['test_accuracy']}")
    return {
        "spec": asdict(spec),
        "threads": threads,
        "model_params": int(flatten_parameters(model).numel()),
        "rows": len(data.y),
        "steps": steps,
        "steps_per_epoch": per_epoch,
        "train_wall_s": clock,
        "curve": curve,
        "to_target": {str(t): to_target(curve, t) for t in spec.targets},
        "final_test_accuracy": curve[-1]["test_accuracy"],
        "best_test_accuracy": max(p["test_accuracy"] or 0.0 for p in curve),
    }


def step_lr(spec: SingleSpec, step: int, steps: int, per_epoch: int) -> float:
    """The lr of step `step` (from 1): --lr-schedule's, ramped up over the warm-up."""
    scheduled = spec.lr * lr_factor(spec.lr_schedule, step, steps)
    warmup_steps = spec.warmup_epochs * per_epoch
    if step >= warmup_steps:
        return scheduled
    return spec.warmup_lr + (scheduled - spec.warmup_lr) * step / warmup_steps


def _point(setup, test, model, step, per_epoch, batch_size, clock, losses) -> dict:  # type: ignore[no-untyped-def]
    metrics = evaluate(setup.spec, test, flatten_parameters(model))
    return {
        "step": step,
        "epoch": step / per_epoch,
        "images": step * batch_size,
        "train_wall_s": clock,
        "train_loss": statistics.fmean(losses) if losses else None,
        "test_loss": metrics["loss"],
        "test_accuracy": metrics.get("accuracy"),
    }


def to_target(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """Where a curve first reaches `target` test accuracy (time, images, step), or None."""
    hit = next((p for p in curve if (p["test_accuracy"] or 0.0) >= target), None)
    if hit is None:
        return None
    return {"train_wall_s": hit["train_wall_s"], "images": hit["images"], "step": hit["step"]}


def markdown_table(result: dict[str, Any]) -> str:
    targets = list(result["to_target"])
    head = " | ".join(f"to {percent(float(t))}: s / images" for t in targets)
    lines = [
        f"| model (weights) | epochs | final acc. | best acc. | {head} | train time (s) |",
        "|---|---:|---:|---:|" + "---:|" * len(targets) + "---:|",
    ]
    reached = [result["to_target"][t] for t in targets]
    cells = " | ".join(
        f"{r['train_wall_s']:.1f} / {r['images']}" if r else "not reached" for r in reached
    )
    s = result["spec"]
    lines.append(
        f"| {s['model']} ({result['model_params']}) | {s['epochs']:g} | "
        f"{result['final_test_accuracy']:.4f} | {result['best_test_accuracy']:.4f} | {cells} | "
        f"{result['train_wall_s']:.1f} |"
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy against training time and against images processed."""
    from ...pipeline.report import pyplot, save_figure

    fig, (by_time, by_images) = pyplot().subplots(1, 2, figsize=(10, 3.8), sharey=True)
    curve = result["curve"][1:]
    accuracy = [p["test_accuracy"] for p in curve]
    label = f"{result['spec']['model']}, one process, {result['threads']} thread(s)"
    by_time.plot([p["train_wall_s"] for p in curve], accuracy, marker=".", label=label)
    by_images.plot([p["images"] for p in curve], accuracy, marker=".", label=label)
    by_time.set_xlabel("training time (s)")
    by_images.set_xlabel("images processed")
    by_time.set_ylabel("test accuracy")
    for panel in (by_time, by_images):
        panel.grid(alpha=0.3)
    by_time.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
