"""DANE (Shamir, Srebro & Zhang, ICML 2014), with inexact local solves for non-convex models.

Legend: w = weights at the start of the round, g_i = grad f_i(w) on shard i (full shard),
g = mean_i g_i, v_i = shard i's local solution, eta and mu as in the paper.
Local problem: h_i(v) = f_i(v) - <g_i - eta*g, v> + (mu/2)||v - w||^2; then w <- mean_i v_i.

`grad_sample` = N > 0 computes f_i and g_i on N rows of each shard, fixed for the whole run
(chosen once from the run's `seed`), instead of the full shard: the same "fixed large sample"
in every round, never a different minibatch. `safeguard` (safeguard.py) backtracks along
rejected steps and optionally adapts mu: its state is the driver state, its scalars reach the
shards as the round's data (a safeguard.Trial), and the broadcast of the gradient phase
decides once per round what the update then carries out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..objective import ShardObjective
from . import safeguard as sg
from .base import Broadcast, LocalContext, LocalOutput, RoundEnd, RoundUpdate, StrategyDefaults
from .checks import checked, non_negative, one_of, positive, rows_or_all
from .local_solver import LocalProblem
from .solvers import Solver


@dataclass(frozen=True, kw_only=True)
class Dane(StrategyDefaults):
    eta: float = checked(positive)
    mu: float = checked(non_negative)
    solver: Solver
    safeguard: str = checked(one_of(*sg.SAFEGUARDS), exclusive=True, default="off")
    grad_sample: int = checked(rows_or_all, exclusive=True, default=0)  # rows of f_i, g_i; 0: all
    seed: int = 0  # the run's seed: which rows grad_sample takes

    name: ClassVar[str] = "dane"
    phases: ClassVar[tuple[str, ...]] = ("local_grad", "local_solve")
    state_type: ClassVar[type | None] = sg.SafeguardState

    def label(self) -> str:
        parts = [self.name, f"eta={self.eta:g}", f"mu={self.mu:g}"]
        if self.safeguard != "off":
            parts.append(f"safeguard={self.safeguard}")
        if self.grad_sample:
            parts.append(f"grad-sample={self.grad_sample}")
        return " ".join([*parts, self.solver.label()])

    def init_state(self, weights: torch.Tensor) -> sg.SafeguardState | None:
        if self.safeguard == "off":
            return None
        return sg.SafeguardState(
            anchor=weights.clone(),
            step=torch.zeros_like(weights),
            anchor_loss=math.inf,
            halvings=0,
            mu=self.mu,
        )

    def round_data(self, state: sg.SafeguardState | None) -> sg.Trial | None:
        return None if state is None else state.trial()

    def local(self, ctx: LocalContext) -> LocalOutput:
        if ctx.phase == 0:
            sampled = self._sampled(ctx.objective)
            loss, g_i = sampled.loss_and_grad(ctx.weights)
            metrics = {"train_loss": loss}
            if self.grad_sample:
                metrics["grad_rows"] = float(sampled.num_samples)
            return LocalOutput(tensors={"grad": g_i}, metrics=metrics)
        if "grad" not in ctx.received:  # the safeguard rejected w: no solve, nothing to send
            return LocalOutput(tensors={})
        assert ctx.previous is not None, "local_solve needs the shard's own gradient"
        mu = self.mu if ctx.round_data is None else ctx.round_data.mu
        problem = LocalProblem(
            ctx.objective,
            linear=ctx.previous.tensors["grad"] - self.eta * ctx.received["grad"],
            anchor=ctx.weights,
            mu=mu,
        )
        v_i, _ = self.solver.solve(problem, ctx.weights, ctx.rng)
        return LocalOutput(tensors={"weights": v_i})

    def _sampled(self, objective: ShardObjective) -> ShardObjective:
        """The shard, or its fixed sample of grad_sample rows (same rows in every round)."""
        if not self.grad_sample or objective.num_samples <= self.grad_sample:
            return objective
        generator = torch.Generator().manual_seed(self.seed)
        rows = torch.randperm(objective.num_samples, generator=generator)[: self.grad_sample]
        rows = rows.sort().values
        return ShardObjective(
            objective.model, objective.x[rows], objective.y[rows], objective.task, objective.l2
        )

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        g = mean.tensors["grad"]
        metrics = {"grad_norm": float(g.norm())}
        if round_data is None:
            return Broadcast(tensors={"grad": g}, metrics=metrics)
        decision = sg.decide(
            mode=self.safeguard,
            loss=mean.metrics["train_loss"],
            anchor_loss=round_data.anchor_loss,
            halvings=round_data.halvings,
            mu=round_data.mu,
            base_mu=self.mu,
        )
        # A rejected w sends nothing: the solves that would be thrown away do not run.
        sent = {"grad": g} if decision.accept else {}
        return Broadcast(tensors=sent, metrics=metrics, decision=decision)

    def update(self, end: RoundEnd) -> RoundUpdate:
        if end.state is None:
            return RoundUpdate(weights=end.mean.tensors["weights"])
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
