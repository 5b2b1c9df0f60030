"""Distributed accelerated gradient descent (Nesterov), one averaged full gradient per round.

Legend: x = the iterate, y = the extrapolated point where the gradient is taken,
g = mean_i grad f_i(y), lr = step size (1/L), beta = momentum ((sqrt(k)-1)/(sqrt(k)+1) for a
condition number k). One round: x' = y - lr * g; y' = x' + beta * (x' - x).
The weights the pipeline sends (and checkpoints and scores) are y, since that is where the
shards must evaluate their gradients; x travels in the driver-side state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import LocalOutput, RoundUpdate, Tensors
from .gd import Gd


@dataclass(frozen=True, kw_only=True)
class Agd(Gd):
    """Gd's shard work (one full gradient); the update extrapolates with momentum beta."""

    beta: float
    name: str = "agd"

    def init_state(self, weights: torch.Tensor) -> Tensors:
        return {"x": weights.clone()}

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        g = mean.tensors["grad"]
        x_next = weights - self.lr * g
        y_next = x_next + self.beta * (x_next - state["x"])
        return RoundUpdate(
            weights=y_next, state={"x": x_next}, metrics={"grad_norm": float(g.norm())}
        )
