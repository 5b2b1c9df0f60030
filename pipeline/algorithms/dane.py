"""DANE (Shamir, Srebro & Zhang, ICML 2014), with inexact local solves for non-convex models.

Legend: w = weights at the start of the round, g_i = grad f_i(w) on shard i (full shard),
g = mean_i g_i, v_i = shard i's local solution, eta and mu as in the paper.
Local problem: h_i(v) = f_i(v) - <g_i - eta*g, v> + (mu/2)||v - w||^2; then w <- mean_i v_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dask_dane.pipeline.algorithms.base import LocalOutput, RoundUpdate, Tensors
from dask_dane.pipeline.algorithms.local_solver import LocalSolver
from dask_dane.pipeline.objective import ShardObjective


@dataclass(frozen=True, kw_only=True)
class Dane:
    eta: float
    mu: float
    solver: LocalSolver
    name: str = "dane"
    phases: tuple[str, ...] = ("local_grad", "local_solve")

    def init_state(self, weights: torch.Tensor) -> Tensors:
        return {}

    def init_shard_state(self, weights: torch.Tensor) -> Tensors:
        return {}

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
        if phase == 0:
            loss, g_i = objective.loss_and_grad(weights)
            return LocalOutput(tensors={"grad": g_i}, metrics={"train_loss": loss})
        assert previous is not None, "local_solve needs the shard's own gradient"
        linear = previous.tensors["grad"] - self.eta * received["grad"]
        v_i, _ = self.solver.solve(
            objective, weights, linear=linear, anchor=weights, mu=self.mu, rng=rng
        )
        return LocalOutput(tensors={"weights": v_i})

    def broadcast(self, phase: int, weights: torch.Tensor, mean: LocalOutput) -> LocalOutput:
        g = mean.tensors["grad"]
        return LocalOutput(tensors={"grad": g}, metrics={"grad_norm": float(g.norm())})

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        return RoundUpdate(weights=mean.tensors["weights"], state=state)
