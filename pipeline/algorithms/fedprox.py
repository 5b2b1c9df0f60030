"""FedProx (Li et al. 2020): FedAvg whose local objective adds (mu/2)||v - w||^2.

Legend: w = weights at the start of the round, v_i = shard i's local solution, mu = proximal
strength. One round: v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2 (K steps, or exact for convex
models); w <- mean_i v_i.

With mu = 0 this is "solve locally, then average": FedAvg (K steps) and one-shot averaging
(exact solves) are this class with their own names (fedavg.py, oneshot.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors
from .local_solver import Solver


@dataclass(frozen=True, kw_only=True)
class FedProx(StrategyDefaults):
    solver: Solver
    mu: float = 0.0
    name: str = "fedprox"
    phases: tuple[str, ...] = ("local_train",)

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
        # (with mu = 0 the anchor plays no part in either solver)
        v_i, first_loss = self.solver.solve(
            objective, weights, linear=None, anchor=weights, mu=self.mu, rng=rng
        )
        return LocalOutput(tensors={"weights": v_i}, metrics={"train_loss": first_loss})

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        return RoundUpdate(weights=mean.tensors["weights"], state=state)
