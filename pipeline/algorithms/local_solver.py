"""Inexact local solves: K minibatch steps on f_i(v) - <c, v> + (mu/2)||v - anchor||^2.

DANE uses c = grad f_i(w) - eta * g and anchor = w; FedAvg uses c = 0 and mu = 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .exact_solver import ExactSolver

LOCAL_OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True, kw_only=True)
class LocalSolver:
    """Hyperparameters of the K-step local solver."""

    steps: int
    lr: float
    batch_size: int
    optimizer: str = "sgd"
    momentum: float = 0.9

    def solve(
        self,
        objective: ShardObjective,
        start: torch.Tensor,
        *,
        linear: torch.Tensor | None,
        anchor: torch.Tensor | None,
        mu: float,
        rng: torch.Generator,
    ) -> tuple[torch.Tensor, float]:
        """Approximate argmin_v f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 from `start`.

        Returns the solution and f_i's loss on the first minibatch (a loss at `start`).
        """
        v = start.detach().clone().requires_grad_(True)
        if self.optimizer == "adam":
            opt = torch.optim.Adam([v], lr=self.lr)
        else:
            opt = torch.optim.SGD([v], lr=self.lr, momentum=self.momentum)
        first_loss = float("nan")
        for step in range(self.steps):
            opt.zero_grad(set_to_none=False)
            loss = objective.batch_loss(v, objective.sample_rows(self.batch_size, rng))
            loss.backward()
            if step == 0:
                first_loss = float(loss.detach())
            with torch.no_grad():
                # The linear and proximal terms have closed-form gradients: add them directly.
                if linear is not None:
                    v.grad.sub_(linear)
                if mu and anchor is not None:
                    v.grad.add_(v - anchor, alpha=mu)
            opt.step()
        return v.detach(), first_loss


# What algorithms accept as their local solver: K steps, or exact (convex models).
Solver = LocalSolver | ExactSolver
