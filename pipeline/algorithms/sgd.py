"""Synchronous minibatch SGD: the DistributedDataParallel equivalent.

Legend: w = weights, g = mean over shards of a minibatch gradient at w, b = momentum buffer.
One communication round = one step: b <- momentum*b + g; w <- w - lr*b.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors


@dataclass(frozen=True, kw_only=True)
class Sgd(StrategyDefaults):
    lr: float
    batch_size: int
    momentum: float = 0.9
    name: str = "sgd"
    phases: tuple[str, ...] = ("local_grad",)

    def init_state(self, weights: torch.Tensor) -> Tensors:
        return {"momentum": torch.zeros_like(weights)}

    def local(
        self,
        phase: int,
        objective: ShardObjective,
        weights: torch.Tensor,
        received: Tensors,
        previous: LocalOutput | None,
        rng: torch.Generator,
        shard_state: Tensors,
    ) -> LocalOutput:
        w = weights.detach().requires_grad_(True)
        loss = objective.batch_loss(w, objective.sample_rows(self.batch_size, rng))
        loss.backward()
        return LocalOutput(
            tensors={"grad": w.grad.detach()}, metrics={"train_loss": float(loss.detach())}
        )

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        g = mean.tensors["grad"]
        b = self.momentum * state["momentum"] + g
        return RoundUpdate(
            weights=weights - self.lr * b,
            state={"momentum": b},
            metrics={"grad_norm": float(g.norm())},
        )
