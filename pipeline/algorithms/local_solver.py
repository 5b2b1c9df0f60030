"""The local problem every solve-then-average algorithm hands its shards, and the K-step solver.

LocalProblem: min_v f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 on one shard. DANE uses
linear = grad f_i(w) - eta * g and anchor = w; FedProx linear = 0; FedAvg also mu = 0.
LocalSolver: K minibatch steps of SGD (with momentum) or Adam on it; exact_solver.py solves
it to a tolerance for convex models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..objective import ShardObjective
from .checks import at_least_one, checked, momentum_range, one_of, positive, validate

LOCAL_OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class LocalProblem:
    """h(v) = f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 (no term where None or 0)."""

    objective: ShardObjective
    linear: torch.Tensor | None = None
    anchor: torch.Tensor | None = None
    mu: float = 0.0

    def value_and_grad(self, v: torch.Tensor) -> tuple[float, torch.Tensor, float]:
        """(h(v), grad h(v), f_i(v)) over the whole shard."""
        f, grad = self.objective.loss_and_grad(v)
        h = f
        if self.linear is not None:
            h -= float(torch.dot(self.linear, v))
            grad = grad - self.linear
        if self.mu and self.anchor is not None:
            diff = v - self.anchor
            h += 0.5 * self.mu * float(torch.dot(diff, diff))
            grad = grad + self.mu * diff
        return h, grad, f


@dataclass(frozen=True, kw_only=True)
class LocalSolver:
    """K minibatch steps (--local-steps) of --local-optimizer at --local-lr."""

    local_steps: int = checked(at_least_one)
    local_lr: float = checked(positive)
    batch_size: int = checked(at_least_one)
    local_optimizer: str = checked(one_of(*LOCAL_OPTIMIZERS), default="sgd")
    momentum: float = checked(momentum_range, default=0.9)

    def __post_init__(self) -> None:
        validate(self)

    def label(self) -> str:
        return f"K={self.local_steps} lr={self.local_lr:g} B={self.batch_size}"

    def solve(
        self, problem: LocalProblem, start: torch.Tensor, rng: torch.Generator
    ) -> tuple[torch.Tensor, float]:
        """Approximately minimise `problem` from `start`.

        Returns the solution and f_i's loss on the first minibatch (a loss at `start`).
        """
        objective, linear, anchor, mu = (
            problem.objective,
            problem.linear,
            problem.anchor,
            problem.mu,
        )
        v = start.detach().clone().requires_grad_(True)
        if self.local_optimizer == "adam":
            opt = torch.optim.Adam([v], lr=self.local_lr)
        else:
            opt = torch.optim.SGD([v], lr=self.local_lr, momentum=self.momentum)
        first_loss = float("nan")
        for step in range(self.local_steps):
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
