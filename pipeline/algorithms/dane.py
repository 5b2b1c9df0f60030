"""DANE (Shamir, Srebro & Zhang, ICML 2014), with inexact local solves for non-convex models.

Legend: w = weights at the start of the round, g_i = grad f_i(w) on shard i (full shard),
g = mean_i g_i, v_i = shard i's local solution, eta and mu as in the paper.
Local problem: h_i(v) = f_i(v) - <g_i - eta*g, v> + (mu/2)||v - w||^2; then w <- mean_i v_i.

`grad_sample` = N > 0 computes f_i and g_i on N rows of each shard, fixed for the whole run
(chosen once from `sample_seed`), instead of the full shard: the same "fixed large sample" in
every round, never a different minibatch. `safeguard` (algorithms/safeguard.py) backtracks
along rejected steps and optionally adapts mu; its state lives in the driver state, and
`for_round` copies the scalars the shards' phases need into the round's strategy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from ..objective import ShardObjective
from . import safeguard as sg
from .base import LocalOutput, RoundUpdate, StrategyDefaults, Tensors
from .local_solver import Solver


@dataclass(frozen=True, kw_only=True)
class Dane(StrategyDefaults):
    eta: float
    mu: float
    solver: Solver
    safeguard: str = "off"
    grad_sample: int = 0  # rows of each shard for f_i and g_i; 0: the full shard
    sample_seed: int = 0
    # Set per round by for_round from the safeguard state (never by the user):
    anchor_loss: float = math.inf  # F(w_a)
    halvings: int = 0  # k
    solve_mu: float | None = None  # the adapted mu; None: mu
    name: str = "dane"
    phases: tuple[str, ...] = ("local_grad", "local_solve")

    def init_state(self, weights: torch.Tensor) -> Tensors:
        if self.safeguard == "off":
            return {}
        scalar = torch.tensor  # float64 scalars: losses and mu compare exactly across rounds
        return {
            "anchor": weights.clone(),
            "step": torch.zeros_like(weights),
            "anchor_loss": scalar(math.inf, dtype=torch.float64),
            "halvings": scalar(0, dtype=torch.int64),
            "mu": scalar(self.mu, dtype=torch.float64),
        }

    def for_round(self, state: Tensors) -> Dane:
        """This round's strategy: the safeguard's scalars from the driver state copied in."""
        if self.safeguard == "off":
            return self
        return replace(
            self,
            anchor_loss=float(state["anchor_loss"]),
            halvings=int(state["halvings"]),
            solve_mu=float(state["mu"]),
        )

    def local(
        self,
        phase: int,
        objective: ShardObjective,
        weights: torch.Tensor,
        received: Tensors,
        previous: LocalOutput | None,
        rng: torch.Generator,
        shard_state: Tensors,
    ) -> LocalOutput:
        if phase == 0:
            sampled = self._sampled(objective)
            loss, g_i = sampled.loss_and_grad(weights)
            metrics = {"train_loss": loss}
            if self.grad_sample:
                metrics["grad_rows"] = float(sampled.num_samples)
            return LocalOutput(tensors={"grad": g_i}, metrics=metrics)
        assert previous is not None, "local_solve needs the shard's own gradient"
        # The loss at w travels on (as an uncounted metric) so that `update` can decide too.
        metrics = {} if self.safeguard == "off" else {"start_loss": previous.metrics["train_loss"]}
        if "grad" not in received:  # the safeguard rejected w: no solve, nothing to send
            return LocalOutput(tensors={}, metrics=metrics)
        linear = previous.tensors["grad"] - self.eta * received["grad"]
        mu = self.mu if self.solve_mu is None else self.solve_mu
        v_i, _ = self.solver.solve(
            objective, weights, linear=linear, anchor=weights, mu=mu, rng=rng
        )
        return LocalOutput(tensors={"weights": v_i}, metrics=metrics)

    def _sampled(self, objective: ShardObjective) -> ShardObjective:
        """The shard, or its fixed sample of grad_sample rows (same rows in every round)."""
        if not self.grad_sample or objective.num_samples <= self.grad_sample:
            return objective
        generator = torch.Generator().manual_seed(self.sample_seed)
        rows = torch.randperm(objective.num_samples, generator=generator)[: self.grad_sample]
        rows = rows.sort().values
        return ShardObjective(
            objective.model, objective.x[rows], objective.y[rows], objective.task, objective.l2
        )

    def broadcast(self, phase: int, weights: torch.Tensor, mean: LocalOutput) -> LocalOutput:
        g = mean.tensors["grad"]
        metrics = {"grad_norm": float(g.norm())}
        if self.safeguard != "off" and not self._decide(mean.metrics["train_loss"]).accept:
            return LocalOutput(tensors={}, metrics=metrics)
        return LocalOutput(tensors={"grad": g}, metrics=metrics)

    def _decide(self, loss: float) -> sg.Decision:
        return sg.decide(
            mode=self.safeguard,
            loss=loss,
            anchor_loss=self.anchor_loss,
            halvings=self.halvings,
            mu=self.mu if self.solve_mu is None else self.solve_mu,
            base_mu=self.mu,
        )

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        if self.safeguard == "off":
            return RoundUpdate(weights=mean.tensors["weights"], state=state)
        loss = mean.metrics["start_loss"]
        decision = self._decide(loss)
        assert decision.accept == ("weights" in mean.tensors), "broadcast and update disagree"
        if decision.accept:  # w is the new anchor, the solves' mean the next candidate
            v = mean.tensors["weights"]
            anchor, step, anchor_loss, new_weights = weights, v - weights, loss, v
        else:  # try a shorter step from the same anchor
            anchor, step, anchor_loss = state["anchor"], state["step"], float(state["anchor_loss"])
            new_weights = anchor + sg.backtracked(decision.halvings) * step
        next_state = {
            "anchor": anchor,
            "step": step,
            "anchor_loss": torch.tensor(anchor_loss, dtype=torch.float64),
            "halvings": torch.tensor(decision.halvings, dtype=torch.int64),
            "mu": torch.tensor(decision.mu, dtype=torch.float64),
        }
        metrics = {"safeguard_rejected": float(not decision.accept), "mu": decision.mu}
        return RoundUpdate(weights=new_weights, state=next_state, metrics=metrics)
