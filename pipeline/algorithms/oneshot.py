"""One-shot averaging (Zhang, Duchi & Wainwright 2012): solve every shard, average once.

Legend: w = starting weights, v_i = argmin f_i (shard i's own minimiser).
One round: v_i = argmin_v f_i(v) from w; w <- mean_i v_i. Further rounds return the same
average (v_i does not depend on w when the solver is exact), so a run needs one round.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dask_dane.pipeline.algorithms.base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors
from dask_dane.pipeline.algorithms.local_solver import Solver
from dask_dane.pipeline.objective import ShardObjective


@dataclass(frozen=True, kw_only=True)
class OneShot(StrategyDefaults):
    solver: Solver
    name: str = "one-shot"
    phases: tuple[str, ...] = ("local_solve",)

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
        return RoundUpdate(weights=mean.tensors["weights"], state=state)
