"""FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.

Legend: w = weights at the start of the round, v_i = shard i's weights after K steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dask_dane.pipeline.algorithms.base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors
from dask_dane.pipeline.algorithms.local_solver import LocalSolver
from dask_dane.pipeline.objective import ShardObjective


@dataclass(frozen=True, kw_only=True)
class FedAvg(StrategyDefaults):
    solver: LocalSolver
    name: str = "fedavg"
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
        v_i, first_loss = self.solver.solve(
            objective, weights, linear=None, anchor=None, mu=0.0, rng=rng
        )
        return LocalOutput(tensors={"weights": v_i}, metrics={"train_loss": first_loss})

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        v = mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        pseudo_grad = (weights - v) / (self.solver.steps * self.solver.lr)
        return RoundUpdate(weights=v, state=state, metrics={"grad_norm": float(pseudo_grad.norm())})
