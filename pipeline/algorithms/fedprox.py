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

import torch

from .base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .checks import checked, momentum_range, non_negative
from .local_solver import LocalProblem
from .server import MomentumState, init_momentum, momentum_label, momentum_step
from .solvers import Solver


@dataclass(frozen=True, kw_only=True)
class SolveAndAverage(StrategyDefaults):
    """Each shard solves its local problem from w; the new weights are the solutions' mean
    (with server momentum, if the subclass has a `server_momentum` above 0)."""

    solver: Solver

    phases: ClassVar[tuple[str, ...]] = ("local_train",)

    @property
    def proximal_mu(self) -> float:
        return 0.0  # (with mu = 0 the anchor plays no part in either solver)

    @property
    def beta(self) -> float:
        return getattr(self, "server_momentum", 0.0)

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        return MomentumState if self.beta else None

    def label(self) -> str:
        return f"{self.name} {self.solver.label()}{momentum_label(self.beta)}"

    def init_state(self, weights: torch.Tensor) -> MomentumState | None:
        return init_momentum(self.beta, weights)

    def local(self, ctx: LocalContext) -> LocalOutput:
        problem = LocalProblem(ctx.objective, anchor=ctx.weights, mu=self.proximal_mu)
        solution = self.solver.solve(problem, ctx.weights, ctx.rng, round_index=ctx.round_index)
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics={"train_loss": solution.first_loss},
            rows=solution.rows,
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        weights, state = momentum_step(
            self.beta, end.state, end.weights, end.mean.tensors["weights"]
        )
        return RoundUpdate(weights=weights, state=state)


@dataclass(frozen=True, kw_only=True)
class FedProx(SolveAndAverage):
    mu: float = checked(non_negative)
    server_momentum: float = checked(momentum_range, default=0.0)

    name: ClassVar[str] = "fedprox"

    @property
    def proximal_mu(self) -> float:
        return self.mu

    def label(self) -> str:
        return f"{self.name} mu={self.mu:g} {self.solver.label()}{momentum_label(self.beta)}"
