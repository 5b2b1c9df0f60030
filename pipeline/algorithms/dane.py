"""DANE (Shamir, Srebro & Zhang, ICML 2014), with inexact local solves for non-convex models.

Legend: w = weights at the start of the round, g_i = grad f_i(w) on shard i (full shard),
g = mean_i g_i, v_i = shard i's local solution, eta and mu as in the paper.
Local problem: h_i(v) = f_i(v) - <g_i - eta*g, v> + (mu/2)||v - w||^2; then w <- mean_i v_i.

Options, each off by default so that plain DANE stays the paper's:
- `grad_sample` = N > 0 computes f_i and g_i on N rows of each shard, fixed for the whole run
  (chosen once from the run's `seed`), instead of the full shard: the same "fixed large
  sample" in every round, never a different minibatch. `grad_sample_growth` = G > 1 makes
  it N * G^(t-1) rows in round t (the first rows of the same fixed order, up to the whole
  shard): a cheap gradient while the weights move a lot, an exact one near the end.
- `local_theta` = theta > 0: InexactDANE's stopping rule (Reddi et al. 2016): a local solve
  stops once ||grad h_i(v)|| (on the step's minibatch) <= theta * ||g||, so --local-steps
  becomes a bound. The steps taken are reported as `local_steps`.
- `correction` = "shrink" scales the shard's part of the correction, g_i - g, by the
  positive-part James-Stein factor of its sampling noise, estimated from two half-samples
  of the gradient sample in the same pass (correction.py); reported per shard as
  `correction_factor`. It is 1 wherever the gradient is the whole shard's.
- `server_momentum` = beta: heavy-ball momentum on the averaged step (server.py);
  `server_lr` = s scales the averaged step (w + s (w_avg - w)), and `server_lr_rule` =
  "fedexp" chooses s each round from the spread of the local updates (FedExP, server.py).
- `trust_radius` = R > 0 keeps every local iterate within ||v - w|| <= R (projected steps).
  On skewed shards f_i flattens once the shard's few classes are fitted, and h_i then falls
  without bound along the correction c_i = g_i - eta*g: the K steps run off (measured in
  docs/results.md, issue 13). A radius bounds how far one round can carry any shard.
- `line_search` = N > 0 adds a third phase that tries N step sizes along the averaged step
  and keeps the best on the global loss (line_search.py).
- `safeguard` (safeguard.py) backtracks along rejected steps and optionally adapts mu: its
  state is the driver state, its scalars reach the shards as the round's data (a
  safeguard.Trial), and the broadcast of the gradient phase decides once per round what the
  update then carries out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from ..round.objective import ShardObjective
from .base import Broadcast, LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .parts import correction as cr
from .parts import line_search as ls
from .parts import safeguard as sg
from .parts.checks import at_least, count_or_off, non_negative, one_of, positive
from .parts.diagnostics import solve_diagnostics
from .parts.hyperparameters import declare
from .parts.local_solver import MU, TRUST_RADIUS, LocalProblem, StopRule, check_trust_radius
from .parts.server import SERVER_PART, ServerStep
from .parts.setting_error import SettingError, setting
from .parts.solvers import SOLVER_PART, Solver


@dataclass(frozen=True, kw_only=True)
class Dane(StrategyDefaults):
    eta: float = declare(1.0, positive, help="DANE: step on the global gradient.")
    mu: float = MU.field()
    solver: Solver = field(metadata=SOLVER_PART)
    safeguard: str = declare(
        "off",
        one_of(*sg.SAFEGUARDS),
        exclusive=True,
        help="DANE: off | backtrack | adaptive-mu (halve rejected steps).",
    )
    grad_sample: int = cr.GRAD_SAMPLE.field()  # rows of f_i, g_i; 0: all
    grad_sample_growth: float = declare(
        1.0,
        at_least(1.0),
        exclusive=True,
        help="DANE: grow the gradient sample by this per round.",
    )
    local_theta: float = declare(
        0.0,
        non_negative,
        exclusive=True,
        help="DANE: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K.",
    )
    correction: str = declare(
        "plain",
        one_of(*cr.CORRECTIONS),
        exclusive=True,
        help="DANE: plain | shrink (scale g_i - g by its sampled signal-to-noise).",
    )
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)
    trust_radius: float = TRUST_RADIUS.field()  # 0: none
    line_search: int = declare(
        0,
        count_or_off,
        exclusive=True,
        help="DANE, skewed shards: best of N steps 2, 1, 1/2.. on the loss; 0: off.",
    )
    seed: int = 0  # the run's seed: which rows grad_sample takes

    name: ClassVar[str] = "dane"

    @property
    def phases(self) -> tuple[str, ...]:  # type: ignore[override]
        searched = ("local_check",) if self.line_search else ()
        return ("local_grad", "local_solve", *searched)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.grad_sample_growth != 1.0 and not self.grad_sample:
            raise SettingError(
                f"{setting('grad_sample_growth')} grows the gradient sample from "
                f"{setting('grad_sample', 'N')} rows; pass {setting('grad_sample', 'N')} as well"
            )
        check_trust_radius(self.trust_radius, self.solver)
        if self.line_search and (self.safeguard != "off" or self.server.server_momentum):
            raise SettingError(
                f"{setting('line_search')} chooses the step itself; it does not combine with "
                f"{setting('safeguard')} or {setting('server_momentum')}: pass one of them"
            )
        if not self.server.scales_nothing and (self.safeguard != "off" or self.line_search):
            raise SettingError(
                f"{setting('server_lr')} and {setting('server_lr_rule')} scale the averaged step;"
                f" {setting('safeguard')} and {setting('line_search')} choose it: pass one"
            )
        if self.server.server_momentum and self.safeguard != "off":
            raise SettingError(
                f"{setting('server_momentum')} and {setting('safeguard')} do not combine "
                "(momentum would carry a "
                "rejected step on); pass one of them"
            )

    @property
    def state_type(self) -> type | None:  # type: ignore[override]
        if self.safeguard != "off":
            return sg.SafeguardState
        return self.server.state_type

    def label(self) -> str:
        parts = [self.name, f"eta={self.eta:g}", f"mu={self.mu:g}"]
        if self.safeguard != "off":
            parts.append(f"safeguard={self.safeguard}")
        if self.grad_sample:
            parts.append(f"grad-sample={self.grad_sample}")
        if self.grad_sample_growth != 1.0:
            parts.append(f"growth={self.grad_sample_growth:g}")
        if self.local_theta:
            parts.append(f"theta={self.local_theta:g}")
        if self.correction != "plain":
            parts.append(f"correction={self.correction}")
        if self.trust_radius:
            parts.append(f"radius={self.trust_radius:g}")
        if self.line_search:
            parts.append(f"line-search={self.line_search}")
        return " ".join([*parts, self.solver.label()]) + self.server.label()

    def init_state(self, weights: torch.Tensor) -> Any:
        if self.safeguard == "off":
            return self.server.init_state(weights)
        return sg.SafeguardState(
            anchor=weights.clone(),
            step=torch.zeros_like(weights),
            anchor_loss=math.inf,
            halvings=0,
            mu=self.mu,
        )

    def round_data(self, state: Any) -> sg.Trial | None:
        return state.trial() if isinstance(state, sg.SafeguardState) else None

    def local(self, ctx: LocalContext) -> LocalOutput:
        if ctx.phase == 0:
            return self._gradient(ctx)
        if ctx.phase == 2:  # the line search: F_i along the averaged step
            sampled = self._sampled(ctx.objective, ctx.round_index)
            proposal = ctx.received["proposal"]
            losses = ls.losses_along(sampled, ctx.weights, proposal, self.line_search)
            return LocalOutput(
                tensors={}, metrics=losses, rows=self.line_search * sampled.num_samples
            )
        if "grad" not in ctx.received:  # the safeguard rejected w: no solve, nothing to send
            return LocalOutput(tensors={})
        assert ctx.previous is not None, "local_solve needs the shard's own gradient"
        g = ctx.received["grad"]
        mu = self.mu if ctx.round_data is None else ctx.round_data.mu
        linear, factor = self._linear(ctx, g)
        problem = LocalProblem(
            ctx.objective,
            linear=linear,
            anchor=ctx.weights,
            mu=mu,
            radius=self.trust_radius,
        )
        solution = self.solver.solve(
            problem, ctx.weights, ctx.rng, round_index=ctx.round_index, stop=self._stop_rule(g)
        )
        metrics = {"local_steps": float(solution.steps)} if self.local_theta else {}
        metrics |= self.server.shard_metrics(ctx.weights, solution.weights)
        diagnostics = solve_diagnostics(problem, ctx.weights, solution.weights, self.seed)
        if factor is not None:
            diagnostics["correction_factor"] = factor
        return LocalOutput(
            tensors={"weights": solution.weights},
            metrics=metrics,
            rows=solution.rows,
            diagnostics=diagnostics,
        )

    def _gradient(self, ctx: LocalContext) -> LocalOutput:
        """Phase 0: f_i and g_i on the shard or its sample (with shrink: and V_i, kept)."""
        sampled = self._sampled(ctx.objective, ctx.round_index)
        rows, kept = sampled.num_samples, {}
        if self.correction == "shrink":
            shard_rows = ctx.objective.num_samples
            loss, g_i, variance = cr.sampling_variance(sampled, shard_rows, ctx.weights)
            metrics = {"train_loss": loss, **cr.noise_metrics(variance, rows, shard_rows)}
            kept = {"variance": torch.tensor(variance, dtype=torch.float64)}
        else:
            loss, g_i = sampled.loss_and_grad(ctx.weights)
            metrics = {"train_loss": loss}
        if self.grad_sample:
            metrics["grad_rows"] = float(rows)
        return LocalOutput(tensors={"grad": g_i}, metrics=metrics, rows=rows, kept=kept)

    def _linear(self, ctx: LocalContext, g: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        """The correction g_i - eta*g, or its shrunk form and the factor alpha_i."""
        assert ctx.previous is not None
        own = ctx.previous.tensors["grad"]
        if self.correction != "shrink":
            return own - self.eta * g, None
        variance = float(ctx.previous.kept["variance"])
        shard_rows = ctx.objective.num_samples
        factor = cr.shrink_factor(own, g, variance, shard_rows, ctx.received[cr.NOISE])
        return cr.shrunk_linear(own, g, self.eta, factor), factor

    def _stop_rule(self, g: torch.Tensor) -> StopRule | None:
        """InexactDANE: solved once ||grad h_i(v)|| <= theta * ||g||."""
        if not self.local_theta:
            return None
        bound = self.local_theta * float(g.norm())
        return lambda grad, v: float(grad.norm()) <= bound

    def _sampled(self, objective: ShardObjective, round_index: int) -> ShardObjective:
        """The shard, or its sample for round `round_index`: grad_sample rows, times
        grad_sample_growth per round since the first."""
        if not self.grad_sample:
            return objective
        size = round(self.grad_sample * self.grad_sample_growth ** (round_index - 1))
        return objective.fixed_sample(size, self.seed)

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        if phase == 1:  # the line search's proposal p = mean_i v_i
            return Broadcast(tensors={"proposal": mean.tensors["weights"]})
        g = mean.tensors["grad"]
        metrics = {"grad_norm": float(g.norm())}
        noise = {}
        if cr.NOISE_ROWS in mean.metrics:  # --correction shrink: [Var(g), n] to every shard
            noise = {cr.NOISE: cr.mean_noise(mean.metrics, mean.rows)}
        if round_data is None:
            return Broadcast(tensors={"grad": g, **noise}, metrics=metrics)
        decision = sg.decide(
            mode=self.safeguard,
            loss=mean.metrics["train_loss"],
            anchor_loss=round_data.anchor_loss,
            halvings=round_data.halvings,
            mu=round_data.mu,
            base_mu=self.mu,
        )
        # A rejected w sends nothing: the solves that would be thrown away do not run.
        sent = {"grad": g, **noise} if decision.accept else {}
        return Broadcast(tensors=sent, metrics=metrics, decision=decision)

    def update(self, end: RoundEnd) -> RoundUpdate:
        if self.line_search:
            proposal = end.broadcasts[1].tensors["proposal"]
            step, loss = ls.best_step(end.mean.metrics, self.line_search)
            weights = end.weights + step * (proposal - end.weights)
            metrics = {"line_search_step": step, "line_search_loss": loss}
            return RoundUpdate(weights=weights, state=end.state, metrics=metrics)
        if not isinstance(end.state, sg.SafeguardState):
            proposal = end.mean.tensors["weights"]
            weights, state, metrics = self.server.step(
                end.state, end.weights, proposal, end.mean.metrics
            )
            return RoundUpdate(weights=weights, state=state, metrics=metrics)
        decision = end.broadcasts[0].decision
        weights, state = sg.next_weights(
            end.state,
            decision,
            weights=end.weights,
            loss=end.metrics["train_loss"],
            proposal=end.mean.tensors.get("weights"),
        )
        metrics = {"safeguard_rejected": float(not decision.accept), "mu": decision.mu}
        return RoundUpdate(weights=weights, state=state, metrics=metrics)
