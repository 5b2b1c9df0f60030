"""FedDyn (Acar et al., ICLR 2021): DANE's linear tilt kept per shard across rounds.

Legend: w = weights at the start of the round, v_i = shard i's local solution, a_i = shard
i's accumulated tilt (the paper's grad L_i, 0 before round 1), alpha = --mu. One round, with
every shard taking part:
    v_i ~ argmin_v f_i(v) - <a_i, v> + (alpha/2)||v - w||^2
    a_i' = a_i - alpha (v_i - w)
    w'   = mean_i (v_i - a_i' / alpha)
The last line is the paper's server step w' = mean_i v_i - h/alpha, where h = mean_i a_i'
when all shards take part, so each shard sends v_i - a_i'/alpha and the phase's average is
w'. At a fixed point a_i = grad f_i(w): the tilt is DANE's correction grad f_i(w) - g (with
mean_i a_i = g = 0 there), learned from the shard's own solves instead of a gradient phase,
so a round is one reduction and one broadcast (FedAvg's bytes), not DANE's two of each.

`trust_radius` = R > 0 keeps every local iterate within ||v - w|| <= R (as DANE's): the tilt
grows by at most alpha R a round, so one shard's runaway solve cannot feed its own tilt.

The server step (server.py: momentum, SlowMo's included, and a step size) acts on w' as on
any local method's average; FedExP's spread is each shard's ||v_i - w||^2.

a_i never leaves the shard: it is shard state (engine/protocol.py), kept next to the driver state
like ADMM's duals, so checkpoints, retries and resumes keep it. Averages are weighted by shard
size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import LocalContext, LocalOutput
from .fedavg import SolveAndAverage
from .parts.local_problem import DIAGNOSTICS_EVERY, due, solve_diagnostics
from .parts.local_solver import MU, TRUST_RADIUS, LocalProblem, check_trust_radius
from .parts.optimizer_state import refuse_kept_state
from .parts.server import SERVER_PART, ServerStep
from .parts.setting_error import SettingError, setting
from .parts.well_posed import FEDDYN_ALPHA, fill_unset

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class FedDynShardState:
    tilt: torch.Tensor  # a_i


@dataclass(frozen=True, kw_only=True)
class FedDyn(SolveAndAverage):
    """Solve-and-average whose local problem carries the shard's tilt (its state), from K
    steps; or exact (lbfgs, cg) on convex models, as the paper's analysis."""

    mu: float = MU.field()  # alpha; above 0 (checked below); unset: 0.01 (well_posed.py)
    trust_radius: float = TRUST_RADIUS.field()  # 0: none
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)
    diagnostics_every: int = DIAGNOSTICS_EVERY.field()
    seed: int = 0  # the run's seed: which rows the per-shard diagnostics read

    name: ClassVar[str] = "feddyn"
    shard_state_type: ClassVar[type | None] = FedDynShardState

    def __post_init__(self) -> None:
        fill_unset(self, {"mu": FEDDYN_ALPHA})
        super().__post_init__()
        if not self.mu > 0:
            raise SettingError(
                f"{setting('algorithm', 'feddyn')} needs {setting('mu')} above 0, its "
                f"regulariser alpha (the server step divides by it); e.g. {setting('mu', 0.01)}"
            )
        check_trust_radius(self.trust_radius, self.solver)
        refuse_kept_state(self.solver, self.name)

    def label(self) -> str:
        radius = f" radius={self.trust_radius:g}" if self.trust_radius else ""
        return f"{self.name} alpha={self.mu:g}{radius} {self.solver.label()}{self.server.label()}"

    def init_shard_state(self, weights: torch.Tensor) -> FedDynShardState:
        import torch

        return FedDynShardState(tilt=torch.zeros_like(weights))

    def local(self, ctx: LocalContext) -> LocalOutput:
        w, tilt = ctx.weights, ctx.shard_state.tilt
        problem = LocalProblem(
            ctx.objective, linear=tilt, anchor=w, mu=self.mu, radius=self.trust_radius
        )
        solution = self.solver.solve(problem, w, ctx.rng, round_index=ctx.round_index)
        v_i = solution.weights
        due_now = due(self.diagnostics_every, ctx.round_index)
        next_tilt = tilt - self.mu * (v_i - w)
        return LocalOutput(
            tensors={"weights": v_i - next_tilt / self.mu},
            metrics={"train_loss": solution.first_loss, **self.server.shard_metrics(w, v_i)},
            shard_state=FedDynShardState(tilt=next_tilt),
            rows=solution.rows,
            diagnostics=solve_diagnostics(problem, w, v_i, self.seed) if due_now else {},
        )
