"""Distributed full-gradient descent: one averaged full-shard gradient per round.

Legend: w = weights, g = mean_i grad f_i(w) (full shards), local_lr = step size.
One round: w <- w - local_lr * g.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .parts.local_solver import LOCAL_LR
from .parts.noise_scale import noise_figures, shard_metrics


@dataclass(frozen=True, kw_only=True)
class Gd(StrategyDefaults):
    local_lr: float = LOCAL_LR.field()  # the step size (1/L)

    name: ClassVar[str] = "gd"
    # No minibatch steps: running statistics (BatchNorm) would never be estimated.
    full_batch: ClassVar[bool] = True
    phases: ClassVar[tuple[str, ...]] = ("local_grad",)

    def label(self) -> str:
        return f"{self.name} lr={self.local_lr:g}"

    def local(self, ctx: LocalContext) -> LocalOutput:
        """grad f_i(w) over the whole shard, with f_i(w) as the round's train loss."""
        loss, g_i = ctx.objective.loss_and_grad(ctx.weights)
        rows = ctx.objective.num_samples
        metrics = {"train_loss": loss, **shard_metrics(g_i, rows, rows)}  # the noise scale's
        return LocalOutput(tensors={"grad": g_i}, metrics=metrics, rows=rows)

    def update(self, end: RoundEnd) -> RoundUpdate:
        g = end.mean.tensors["grad"]
        return RoundUpdate(
            weights=end.weights - self.local_lr * g,
            state=end.state,
            metrics={
                "grad_norm": float(g.norm()),
                **noise_figures(end.mean.metrics, g, end.mean.rows),
            },
        )
