"""Consensus ADMM (Boyd et al. 2011, section 7.1), scaled form, with per-shard duals.

Legend: z = the consensus weights (what the pipeline carries), x_i = shard i's local variable,
u_i = shard i's scaled dual, rho = penalty. One round k:
    x_i = argmin_x f_i(x) + (rho/2)||x - z + u_i||^2     (exact for convex models)
    z'  = mean_i (x_i + u_i)                              (the phase's average)
    u_i' = u_i + x_i - z'
f_i already holds the L2 penalty, so z has no extra term. The dual update needs z', which the
shard only learns when the next round sends it, so each shard keeps (u_i, x_i) as its own
state (engine/protocol.py) and applies u_i' = u_i + x_i - z' at the start of the next round.
Averages are weighted by shard size, which is ADMM on sum_i (n_i/N) f_i with penalty
rho * n_i/N per block: the same updates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import LocalContext, LocalOutput
from .fedavg import SolveAndAverage
from .parts.checks import positive
from .parts.hyperparameters import declare
from .parts.local_solver import LocalProblem

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class AdmmShardState:
    dual: torch.Tensor  # u_i
    local: torch.Tensor  # x_i


@dataclass(frozen=True, kw_only=True)
class Admm(SolveAndAverage):
    """Solve-and-average (the plain average is z') whose local problem holds the dual."""

    rho: float = declare(1.0, positive, help="admm: consensus penalty.")

    name: ClassVar[str] = "admm"
    phases: ClassVar[tuple[str, ...]] = ("local_solve",)
    shard_state_type: ClassVar[type | None] = AdmmShardState

    def label(self) -> str:
        return f"{self.name} rho={self.rho:g} {self.solver.label()}"

    def init_shard_state(self, weights: torch.Tensor) -> AdmmShardState:
        # u_0 = 0 and x_0 = z_0, so that the first round's dual update u_1 = u_0 + x_0 - z_0 = 0.
        import torch

        return AdmmShardState(dual=torch.zeros_like(weights), local=weights.clone())

    def local(self, ctx: LocalContext) -> LocalOutput:
        z, state = ctx.weights, ctx.shard_state
        u_i = state.dual + state.local - z
        problem = LocalProblem(ctx.objective, anchor=z - u_i, mu=self.rho)
        solution = self.solver.solve(problem, z, ctx.rng, round_index=ctx.round_index)
        x_i = solution.weights
        return LocalOutput(
            tensors={"weights": x_i + u_i},
            metrics={"train_loss": solution.first_loss},
            shard_state=AdmmShardState(dual=u_i, local=x_i),
            rows=solution.rows,
        )
