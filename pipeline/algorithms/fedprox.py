"""FedProx (Li et al. 2020): FedAvg whose local objective adds (mu/2)||v - w||^2.

Legend: w = weights at the start of the round, v_i = shard i's local solution, mu = proximal
strength. One round: v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2 (K steps, or exact for convex
models); w <- mean_i v_i.

Without the proximal term this is "solve locally, then average" (`SolveAndAverage`): FedAvg
(K steps, fedavg.py) and one-shot averaging (exact solves, oneshot.py) are that, under their
own names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .checks import checked, non_negative
from .local_solver import LocalProblem
from .solvers import Solver


@dataclass(frozen=True, kw_only=True)
class SolveAndAverage(StrategyDefaults):
    """Each shard solves its local problem from w; the new weights are the solutions' mean."""

    solver: Solver

    phases: ClassVar[tuple[str, ...]] = ("local_train",)

    @property
    def proximal_mu(self) -> float:
        return 0.0  # (with mu = 0 the anchor plays no part in either solver)

    def label(self) -> str:
        return f"{self.name} {self.solver.label()}"

    def local(self, ctx: LocalContext) -> LocalOutput:
        problem = LocalProblem(ctx.objective, anchor=ctx.weights, mu=self.proximal_mu)
        v_i, first_loss = self.solver.solve(problem, ctx.weights, ctx.rng)
        return LocalOutput(tensors={"weights": v_i}, metrics={"train_loss": first_loss})

    def update(self, end: RoundEnd) -> RoundUpdate:
        return RoundUpdate(weights=end.mean.tensors["weights"], state=end.state)


@dataclass(frozen=True, kw_only=True)
class FedProx(SolveAndAverage):
    mu: float = checked(non_negative)

    name: ClassVar[str] = "fedprox"

    @property
    def proximal_mu(self) -> float:
        return self.mu

    def label(self) -> str:
        return f"{self.name} mu={self.mu:g} {self.solver.label()}"
