"""Distributed full-gradient descent: one averaged full-shard gradient per round.

Legend: w = weights, g = mean_i grad f_i(w) (full shards), local_lr = step size.
One round: w <- w - local_lr * g.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine.protocol import LocalContext, LocalOutput, RoundEnd, RoundUpdate, Strategy
from .parts.local_solver import LOCAL_LR
from .parts.noise_scale import gradient_figures, shard_gradient
from .parts.row_figures import RowFigures


@dataclass(frozen=True, kw_only=True)
class Gd(RowFigures, Strategy):
    local_lr: float = LOCAL_LR.field()  # the step size (1/L)

    name: ClassVar[str] = "gd"
    # No minibatch steps: running statistics (BatchNorm) would never be estimated.
    full_batch: ClassVar[bool] = True
    phases: ClassVar[tuple[str, ...]] = ("local_grad",)

    def label(self) -> str:
        return f"{self.name} lr={self.local_lr:g}"

    def local(self, ctx: LocalContext) -> LocalOutput:
        """grad f_i(w) over the whole shard, with f_i(w) as the round's train loss."""
        return shard_gradient(ctx.objective, ctx.objective, ctx.weights)

    def update(self, end: RoundEnd) -> RoundUpdate:
        g = end.mean.tensors["grad"]
        metrics = gradient_figures(end.mean)
        return RoundUpdate(
            weights=end.weights - self.local_lr * g, state=end.state, metrics=metrics
        )
