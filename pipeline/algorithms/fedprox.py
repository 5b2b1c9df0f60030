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
from typing import Any, ClassVar

import torch

from .base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .parts.checks import checked, momentum_range, non_negative, one_of, positive
from .parts.local_solver import LocalProblem
from .parts.server import (
    SERVER_LR_RULES,
    MomentumState,
    check_server_lr,
    init_momentum,
    momentum_label,
    server_lr_label,
    server_update,
    update_squared,
)
from .parts.solvers import Solver


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
    def server_step(self) -> tuple[float, str]:
        """(--server-lr, --server-lr-rule), where the subclass has them (fixed 1: none)."""
        return getattr(self, "server_lr", 1.0), getattr(self, "server_lr_rule", "fixed")

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        return MomentumState if self.beta else None

    def server_label(self) -> str:
        return momentum_label(self.beta) + server_lr_label(*self.server_step)

    def label(self) -> str:
        return f"{self.name} {self.solver.label()}{self.server_label()}"

    def init_state(self, weights: torch.Tensor) -> MomentumState | None:
        return init_momentum(self.beta, weights)

    def local(self, ctx: LocalContext) -> LocalOutput:
        problem = LocalProblem(ctx.objective, anchor=ctx.weights, mu=self.proximal_mu)
        solution = self.solver.solve(problem, ctx.weights, ctx.rng, round_index=ctx.round_index)
        spread = update_squared(self.server_step[1], ctx.weights, solution.weights)
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics={"train_loss": solution.first_loss, **spread},
            rows=solution.rows,
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        weights, state, metrics = self.server_step_from(end)
        return RoundUpdate(weights=weights, state=state, metrics=metrics)

    def server_step_from(self, end: RoundEnd) -> tuple[torch.Tensor, Any, dict[str, float]]:
        lr, rule = self.server_step
        return server_update(
            beta=self.beta, state=end.state, weights=end.weights,
            proposal=end.mean.tensors["weights"], lr=lr, rule=rule, metrics=end.mean.metrics,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FedProx(SolveAndAverage):
    mu: float = checked(non_negative)
    server_momentum: float = checked(momentum_range, default=0.0)
    server_lr: float = checked(positive, exclusive=True, default=1.0)
    server_lr_rule: str = checked(one_of(*SERVER_LR_RULES), exclusive=True, default="fixed")

    name: ClassVar[str] = "fedprox"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_server_lr(self.server_lr, self.server_lr_rule)

    @property
    def proximal_mu(self) -> float:
        return self.mu

    def label(self) -> str:
        return f"{self.name} mu={self.mu:g} {self.solver.label()}{self.server_label()}"
