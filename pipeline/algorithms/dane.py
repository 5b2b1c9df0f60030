"""DANE (Shamir, Srebro & Zhang, ICML 2014), with inexact local solves for non-convex models.

Legend: w = weights at the start of the round, g_i = grad f_i(w) on shard i, g = mean_i g_i,
v_i = shard i's local solution, eta and mu as in the paper. One round is the paper's two
steps:
1. every shard computes g_i; they are averaged into g (phase `local_grad`);
2. every shard solves h_i(v) = f_i(v) - <g_i - eta*g, v> + (mu/2)||v - w||^2 (phase
   `local_solve`), and w <- mean_i v_i.

What the research added is in parts, each the paper's by default:
- `gradient` (parts/gradient_estimate.py): how step 1 estimates g_i: the full shard, a
  fixed sample that may grow, and the correction g_i - eta*g plain or shrunk;
- `solver` (parts/solvers.py): K minibatch steps or an exact solve, stopped early by
  `local_theta` = theta > 0 (InexactDANE, Reddi et al. 2016: once ||grad h_i(v)|| on the
  step's minibatch <= theta * ||g||; the steps taken are reported as `local_steps`), and
  kept within ||v - w|| <= `trust_radius` = R > 0 (projected steps: on skewed shards f_i
  flattens once the shard's few classes are fitted and h_i falls without bound along the
  correction; docs/results.md, issue 13);
- `update_rule` (parts/update_rule.py): how step 2's mean becomes the new weights: the server
  step (the plain average, or with momentum and a step size), a safeguard, or a line
  search (a third phase, `local_check`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from ..engine.protocol import (
    Broadcast,
    LocalContext,
    LocalOutput,
    RoundEnd,
    RoundUpdate,
    Strategy,
)
from .parts.checks import non_negative, optional, positive
from .parts.gradient_estimate import GRADIENT_PART, GradientEstimate
from .parts.hyperparameters import declare
from .parts.local_problem import DIAGNOSTICS_EVERY, due, solve_diagnostics
from .parts.local_solver import (
    MU,
    TRUST_RADIUS,
    LocalProblem,
    LocalSolver,
    StopRule,
    check_trust_radius,
)
from .parts.noise_scale import gradient_figures
from .parts.optimizer_state import KeepsLocalOptimizerState
from .parts.row_figures import RowFigures
from .parts.setting_error import SettingError, setting
from .parts.solvers import SOLVER_PART, Solver
from .parts.stop_rule import SmoothedStop
from .parts.update_rule import PLAIN_UPDATE, UPDATE_PART, UpdateRule
from .parts.well_posed import fill_dane

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class Dane(RowFigures, KeepsLocalOptimizerState, Strategy):
    eta: float = declare(1.0, positive, help="DANE: step on the global gradient.")
    mu: float = MU.field()  # unset: by model and passes a solve makes (well_posed.py)
    gradient: GradientEstimate = field(default_factory=GradientEstimate, metadata=GRADIENT_PART)
    solver: Solver = field(metadata=SOLVER_PART)
    local_theta: float = declare(
        None,
        optional(non_negative),
        exclusive=True,
        help="DANE: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K "
        "[0.3 on networks with mu >= 0.1, else 0].",
    )
    trust_radius: float = TRUST_RADIUS.field()  # 0: none
    update_rule: UpdateRule = field(default_factory=UpdateRule, metadata=UPDATE_PART)
    diagnostics_every: int = DIAGNOSTICS_EVERY.field()
    seed: int = 0  # the run's seed: which rows the per-shard diagnostics read
    convex_model: bool = False  # the run's model is convex: the unset take the paper's values
    steps_per_pass: float = 0.0  # minibatch steps in a pass over a shard; 0: store not known

    name: ClassVar[str] = "dane"

    def __post_init__(self) -> None:
        long = isinstance(self.solver, LocalSolver) and self.steps_per_pass > 0
        fill_dane(self, self.solver.local_steps / self.steps_per_pass if long else math.inf)
        super().__post_init__()
        check_trust_radius(self.trust_radius, self.solver)
        if self.gradient.grad_sample_local and not isinstance(self.solver, LocalSolver):
            raise SettingError(
                f"{setting('grad_sample_local')} sizes the gradient by the local steps of "
                f"{setting('local_solver', 'steps')}; an exact solve reads the whole shard"
            )

    def _local_rows(self, round_index: int) -> tuple[int, int]:
        """(K_t, B) of the round's local solve, for a gradient sample sized by it."""
        if not isinstance(self.solver, LocalSolver):
            return (0, 1)
        return (self.solver.steps(round_index), self.solver.batch_size)

    @property
    def phases(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("local_grad", "local_solve", *self.update_rule.phases)

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        return self.update_rule.state_type

    def init_state(self, weights: torch.Tensor) -> Any:
        return self.update_rule.init_state(weights, self.mu)

    def round_data(self, state: Any) -> Any:
        return self.update_rule.round_data(state)

    def label(self) -> str:
        guarded, searched, server = self.update_rule.label_parts()
        gradient = self.gradient
        parts = [self.name, f"eta={self.eta:g}", f"mu={self.mu:g}", *guarded]
        if gradient.grad_sample:
            parts.append(f"grad-sample={gradient.grad_sample}")
        if gradient.grad_sample_local:
            parts.append(f"grad-sample={gradient.grad_sample_local:g}KB")
        if gradient.grad_sample_growth != 1.0:
            parts.append(f"growth={gradient.grad_sample_growth:g}")
        if self.local_theta:
            parts.append(f"theta={self.local_theta:g}")
        if gradient.correction != "plain":
            parts.append(f"correction={gradient.correction}")
        if self.trust_radius:
            parts.append(f"radius={self.trust_radius:g}")
        return " ".join([*parts, *searched, self.solver.label()]) + server

    def local(self, ctx: LocalContext) -> LocalOutput:
        if ctx.phase == 0:  # step 1: g_i
            return self.gradient.local_gradient(ctx, self._local_rows(ctx.round_index))
        if ctx.phase == 2:  # the line search: F_i along the averaged step
            local = self._local_rows(ctx.round_index)
            sampled = self.gradient.rows(ctx.objective, ctx.round_index, local)
            checked = self.update_rule.check_losses(sampled, ctx.weights, ctx.received)
            # The round's last phase hands the kept state on: the solve's, one phase back.
            after = ctx.previous.shard_state if ctx.previous else ctx.shard_state
            return replace(checked, shard_state=after)
        if "grad" not in ctx.received:  # the safeguard rejected w: no solve, nothing to send
            return LocalOutput(tensors={}, shard_state=ctx.shard_state)
        return self._solve(ctx)

    def _solve(self, ctx: LocalContext) -> LocalOutput:
        """Step 2 on one shard: v_i ~ argmin h_i."""
        g = ctx.received["grad"]
        linear, factor = self.gradient.linear(ctx, g, self.eta)
        problem = LocalProblem(
            ctx.objective,
            linear=linear,
            anchor=ctx.weights,
            mu=self.update_rule.mu(ctx.round_data, self.mu),
            radius=self.trust_radius,
        )
        stop = self._stop_rule(g, ctx.round_index)
        solution = self.solver.solve(
            problem,
            ctx.weights,
            ctx.rng,
            round_index=ctx.round_index,
            stop=stop,
            state=ctx.shard_state,
        )
        metrics = {"local_steps": float(solution.steps)} if self.local_theta else {}
        metrics |= self.update_rule.server.shard_metrics(ctx.weights, solution.weights)
        diagnostics = (
            solve_diagnostics(problem, ctx.weights, solution.weights, self.seed)
            if due(self.diagnostics_every, ctx.round_index)
            else {}
        )
        if factor is not None:  # shrink's own output, free: reported every round
            diagnostics["correction_factor"] = factor
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics=metrics,
            rows=solution.rows,
            diagnostics=diagnostics,
            shard_state=solution.state,
        )

    def _stop_rule(self, g: torch.Tensor, round_index: int) -> StopRule | None:
        """InexactDANE: solved once ||grad h_i(v)|| <= theta * ||g|| (K steps: on their
        gradients' moving average, parts/stop_rule.py)."""
        if not self.local_theta:
            return None
        bound = self.local_theta * float(g.norm())
        if isinstance(self.solver, LocalSolver):
            return SmoothedStop(bound, self.solver.steps(round_index))
        return lambda grad, v: float(grad.norm()) <= bound

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        if phase == 1:  # after the solves, for the line search: p = mean_i v_i to every shard
            return Broadcast(tensors={"proposal": mean.tensors["weights"]})
        g = mean.tensors["grad"]  # step 1's average
        sent = {"grad": g, **self.gradient.noise(mean)}
        sent, decision = self.update_rule.decide(mean, round_data, self.mu, sent)
        return Broadcast(tensors=sent, metrics=gradient_figures(mean), decision=decision)

    def update(self, end: RoundEnd) -> RoundUpdate:
        if self.update_rule == PLAIN_UPDATE:  # the paper's step 3, w' = mean_i v_i, as it is
            return RoundUpdate(weights=end.mean.tensors["weights"], state=end.state)
        return self.update_rule.update(end)
