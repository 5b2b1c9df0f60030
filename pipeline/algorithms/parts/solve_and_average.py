"""Solve locally, then average: what FedAvg, FedProx and one-shot averaging share.

Legend: w = weights at the start of the round, v_i = shard i's local solution. One round:
v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2 (K steps, or exact for convex models; mu = 0 but
for FedProx), then the server step on the average (server.py): w <- mean_i v_i by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..base import LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .local_problem import LocalProblem
from .server import MomentumState, ServerStep
from .solvers import SOLVER_PART, Solver

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class SolveAndAverage(StrategyDefaults):
    """Each shard solves its local problem from w; the server step takes their mean.

    `server` is the plain average here; a subclass that offers the server step's settings
    takes it as a part (server.SERVER_PART), built from the run's settings.
    """

    solver: Solver = field(metadata=SOLVER_PART)
    server: ServerStep = field(default_factory=ServerStep)

    phases: ClassVar[tuple[str, ...]] = ("local_train",)

    @property
    def proximal_mu(self) -> float:
        return 0.0  # (with mu = 0 the anchor plays no part in either solver)

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        return self.server.state_type

    def label(self) -> str:
        return f"{self.name} {self.solver.label()}{self.server.label()}"

    def init_state(self, weights: torch.Tensor) -> MomentumState | None:
        return self.server.init_state(weights)

    def local(self, ctx: LocalContext) -> LocalOutput:
        problem = LocalProblem(ctx.objective, anchor=ctx.weights, mu=self.proximal_mu)
        solution = self.solver.solve(problem, ctx.weights, ctx.rng, round_index=ctx.round_index)
        spread = self.server.shard_metrics(ctx.weights, solution.weights)
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics={"train_loss": solution.first_loss, **spread},
            rows=solution.rows,
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        weights, state, metrics = self.server_step_from(end)
        return RoundUpdate(weights=weights, state=state, metrics=metrics)

    def server_step_from(self, end: RoundEnd) -> tuple[torch.Tensor, Any, dict[str, float]]:
        proposal = end.mean.tensors["weights"]
        return self.server.step(end.state, end.weights, proposal, end.mean.metrics, end.round_index)
