"""Synchronous minibatch SGD: the DistributedDataParallel equivalent.

Legend: w = weights, g = mean over shards of a minibatch gradient at w, b = momentum buffer.
One communication round = one step: b <- momentum*b + g; w <- w - local_lr*b.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .checks import at_least_one, checked, momentum_range, positive


@dataclass(frozen=True, kw_only=True)
class SgdState:
    momentum: torch.Tensor  # the buffer b


@dataclass(frozen=True, kw_only=True)
class Sgd(StrategyDefaults):
    local_lr: float = checked(positive)  # the step size (named like the shared flag)
    batch_size: int = checked(at_least_one)
    momentum: float = checked(momentum_range, default=0.9)

    name: ClassVar[str] = "sgd"
    phases: ClassVar[tuple[str, ...]] = ("local_grad",)
    state_type: ClassVar[type | None] = SgdState

    def label(self) -> str:
        return f"{self.name} lr={self.local_lr:g} B={self.batch_size}"

    def init_state(self, weights: torch.Tensor) -> SgdState:
        return SgdState(momentum=torch.zeros_like(weights))

    def local(self, ctx: LocalContext) -> LocalOutput:
        w = ctx.weights.detach().requires_grad_(True)
        objective = ctx.objective
        loss = objective.batch_loss(w, objective.sample_rows(self.batch_size, ctx.rng))
        loss.backward()
        return LocalOutput(
            tensors={"grad": w.grad.detach()}, metrics={"train_loss": float(loss.detach())}
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        g = end.mean.tensors["grad"]
        b = self.momentum * end.state.momentum + g
        return RoundUpdate(
            weights=end.weights - self.local_lr * b,
            state=SgdState(momentum=b),
            metrics={"grad_norm": float(g.norm())},
        )
