"""FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.

Legend: w = weights at the start of the round, v_i = shard i's weights after K steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import LocalOutput, RoundUpdate, Tensors
from .fedprox import FedProx
from .local_solver import LocalSolver


@dataclass(frozen=True, kw_only=True)
class FedAvg(FedProx):
    """FedProx with mu = 0 (fedprox.py) and K local steps; reports a pseudo-gradient norm."""

    solver: LocalSolver
    name: str = "fedavg"

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        v = mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        pseudo_grad = (weights - v) / (self.solver.steps * self.solver.lr)
        return RoundUpdate(weights=v, state=state, metrics={"grad_norm": float(pseudo_grad.norm())})
