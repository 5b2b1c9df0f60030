"""Consensus ADMM (Boyd et al. 2011, section 7.1), scaled form, with per-shard duals.

Legend: z = the consensus weights (what the pipeline carries), x_i = shard i's local variable,
u_i = shard i's scaled dual, rho = penalty. One round k:
    x_i = argmin_x f_i(x) + (rho/2)||x - z + u_i||^2     (exact for convex models)
    z'  = mean_i (x_i + u_i)                              (the phase's average)
    u_i' = u_i + x_i - z'
f_i already holds the L2 penalty, so z has no extra term. The dual update needs z', which the
shard only learns when the next round sends it, so each shard keeps (u_i, x_i) as its own
state (algorithms/base.py) and applies u_i' = u_i + x_i - z' at the start of the next round.
Averages are weighted by shard size, which is ADMM on sum_i (n_i/N) f_i with penalty
rho * n_i/N per block: the same updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors
from .local_solver import Solver


@dataclass(frozen=True, kw_only=True)
class Admm(StrategyDefaults):
    rho: float
    solver: Solver
    name: str = "admm"
    phases: tuple[str, ...] = ("local_solve",)

    def init_shard_state(self, weights: torch.Tensor) -> Tensors:
        # u_0 = 0 and x_0 = z_0, so that the first round's dual update u_1 = u_0 + x_0 - z_0 = 0.
        return {"dual": torch.zeros_like(weights), "local": weights.clone()}

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
        z = weights
        u_i = shard_state["dual"] + shard_state["local"] - z
        x_i, first_loss = self.solver.solve(
            objective, z, linear=None, anchor=z - u_i, mu=self.rho, rng=rng
        )
        return LocalOutput(
            tensors={"weights": x_i + u_i},
            metrics={"train_loss": first_loss},
            shard_state={"dual": u_i, "local": x_i},
        )

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        return RoundUpdate(weights=mean.tensors["weights"], state=state)
