"""Solve locally, then average: FedAvg, FedProx and one-shot averaging, one round shape.

Legend: w = weights at the start of the round, v_i = shard i's local solution, mu = proximal
strength. One round: v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2 (K steps, or exact for convex
models; mu = 0 but for FedProx), then the server step on the average (server.py): w <- mean_i
v_i by default.
- FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.
- FedProx (Li et al. 2020): FedAvg whose local objective adds (mu/2)||v - w||^2.
- One-shot averaging (Zhang, Duchi & Wainwright 2012): solve every shard, average once.
  v_i = argmin_v f_i(v) from w; further rounds return the same average (v_i does not depend
  on w when the solver is exact), so a run needs one round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import LocalContext, LocalOutput, RoundEnd, RoundUpdate, Strategy
from .parts.local_solver import MU, LocalProblem, needs_steps
from .parts.optimizer_state import KeepsLocalOptimizerState
from .parts.row_figures import RowFigures
from .parts.server import SERVER_PART, MomentumState, ServerStep
from .parts.setting_error import setting
from .parts.solvers import SOLVER_PART, Solver
from .parts.well_posed import FEDPROX_MU, fill_unset

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class SolveAndAverage(RowFigures, KeepsLocalOptimizerState, Strategy):
    """Each shard solves its local problem from w; the server step takes their mean.

    `server` is the plain average here; a subclass that offers the server step's settings
    takes it as a part (server.SERVER_PART), built from the run's settings.
    """

    solver: Solver = field(metadata=SOLVER_PART)
    server: ServerStep = field(default_factory=ServerStep)

    phases: ClassVar[tuple[str, ...]] = ("local_train",)
    proximal_mu: ClassVar[float] = 0.0  # (with mu = 0 the anchor plays no part in either solver)

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        return self.server.state_type

    def label(self) -> str:
        return f"{self.name} {self.solver.label()}{self.server.label()}"

    def init_state(self, weights: torch.Tensor) -> MomentumState | None:
        return self.server.init_state(weights)

    def local(self, ctx: LocalContext) -> LocalOutput:
        problem = LocalProblem(ctx.objective, anchor=ctx.weights, mu=self.proximal_mu)
        solution = self.solver.solve(
            problem, ctx.weights, ctx.rng, round_index=ctx.round_index, state=ctx.shard_state
        )
        spread = self.server.shard_metrics(ctx.weights, solution.weights)
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics={"train_loss": solution.first_loss, **spread},
            rows=solution.rows,
            shard_state=solution.state,
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        return self.server.update(end, end.mean.tensors["weights"])


@dataclass(frozen=True, kw_only=True)
class OneShot(SolveAndAverage):
    """Solve-and-average under its own name and task prefix."""

    name: ClassVar[str] = "one-shot"
    phases: ClassVar[tuple[str, ...]] = ("local_solve",)


@dataclass(frozen=True, kw_only=True)
class FedProx(SolveAndAverage):
    """v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2; w <- mean_i v_i, or the server step on it."""

    mu: float = MU.field()  # unset: 0, FedAvg's local problem (bounded for any mu)
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)

    name: ClassVar[str] = "fedprox"

    def __post_init__(self) -> None:
        fill_unset(self, {"mu": FEDPROX_MU})
        super().__post_init__()

    @property
    def proximal_mu(self) -> float:  # type: ignore[override]
        return self.mu

    def label(self) -> str:
        return f"{self.name} mu={self.mu:g} {self.solver.label()}{self.server.label()}"


@dataclass(frozen=True, kw_only=True)
class FedAvg(SolveAndAverage):
    """Solve-and-average with K local steps; reports a pseudo-gradient norm."""

    server: ServerStep = field(
        default_factory=ServerStep, metadata=SERVER_PART
    )  # FedAvgM with server momentum above 0

    name: ClassVar[str] = "fedavg"

    def __post_init__(self) -> None:
        super().__post_init__()
        exact = f"for exact local solves use {setting('algorithm')} one-shot or fedprox"
        needs_steps(self.solver, self.name, exact)

    def update(self, end: RoundEnd) -> RoundUpdate:
        v = end.mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        grad_norm = self.solver.pseudo_grad_norm(end.weights, v, end.round_index)
        return self.server.update(end, v, {"grad_norm": grad_norm})
