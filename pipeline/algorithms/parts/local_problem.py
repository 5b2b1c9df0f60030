"""The local problem every solve-then-average algorithm hands its shards, and a solve's result.

LocalProblem: min_v f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 on one shard, optionally
within a trust region ||v - anchor|| <= radius. DANE uses linear = grad f_i(w) - eta * g and
anchor = w; FedProx linear = 0; FedAvg also mu = 0. The solvers take it: K minibatch steps
(local_solver.py) or an exact method to a tolerance (exact_solver.py); both return a Solution.
Apart from the solvers, so that what a problem is reads without how it is solved.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ...round.objective import ShardObjective

# (gradient of the local problem at v on this step's minibatch, v) -> stop before stepping?
StopRule = Callable[["torch.Tensor", "torch.Tensor"], bool]


@dataclass(frozen=True)
class LocalProblem:
    """h(v) = f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 (no term where None or 0),
    over ||v - anchor|| <= radius where radius > 0 (a trust region; 0: everywhere)."""

    objective: ShardObjective
    linear: torch.Tensor | None = None
    anchor: torch.Tensor | None = None
    mu: float = 0.0
    radius: float = 0.0

    def project(self, v: torch.Tensor) -> None:
        """Pull v (in place) back onto the trust region's sphere where it has left it."""
        import torch

        if not self.radius or self.anchor is None:
            return
        distance = float(torch.linalg.vector_norm(v - self.anchor))
        if distance > self.radius:
            v.sub_(self.anchor).mul_(self.radius / distance).add_(self.anchor)

    def value(self, v: torch.Tensor) -> tuple[float, float]:
        """(h(v), f_i(v)) over the whole shard, without gradients."""
        f = h = self.objective.loss(v)  # tensor methods, not torch.*: no import of torch here
        if self.linear is not None:
            h -= float(self.linear.dot(v))
        if self.mu and self.anchor is not None:
            h += 0.5 * self.mu * float(((v - self.anchor) ** 2).sum())
        return h, f

    def value_and_grad(self, v: torch.Tensor) -> tuple[float, torch.Tensor, float]:
        """(h(v), grad h(v), f_i(v)) over the whole shard."""
        f, grad = self.objective.loss_and_grad(v)
        h = f
        if self.linear is not None:
            h -= float(self.linear.dot(v))
            grad = grad - self.linear
        if self.mu and self.anchor is not None:
            diff = v - self.anchor
            h += 0.5 * self.mu * float(diff.dot(diff))
            grad = grad + self.mu * diff
        return h, grad, f


@dataclass(frozen=True, kw_only=True)
class Solution:
    """A local solve's result: the solution and what it cost."""

    weights: torch.Tensor
    first_loss: float  # f_i on the first minibatch (a loss at the start), or f_i(start)
    steps: int  # minibatch steps taken, or the exact method's iterations
    rows: int  # rows of the shard read (images processed)
