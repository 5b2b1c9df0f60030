"""Distributed full-gradient descent: one averaged full-shard gradient per round.

Legend: w = weights, g = mean_i grad f_i(w) (full shards), lr = step size.
One round: w <- w - lr * g.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors


def full_gradient(objective: ShardObjective, weights: torch.Tensor) -> LocalOutput:
    """grad f_i(w) over the whole shard, with f_i(w) as the round's train loss."""
    loss, g_i = objective.loss_and_grad(weights)
    return LocalOutput(tensors={"grad": g_i}, metrics={"train_loss": loss})


@dataclass(frozen=True, kw_only=True)
class Gd(StrategyDefaults):
    lr: float
    name: str = "gd"
    phases: tuple[str, ...] = ("local_grad",)

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
        return full_gradient(objective, weights)

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        g = mean.tensors["grad"]
        return RoundUpdate(
            weights=weights - self.lr * g, state=state, metrics={"grad_norm": float(g.norm())}
        )
