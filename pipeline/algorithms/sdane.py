"""S-DANE (Jiang, Rodomanov & Stich, NeurIPS 2024): DANE steps around stabilised prox-centres.

Legend: v = the prox-centre (the weights the pipeline carries, scored and checkpointed),
x_i = shard i's local solution, lam = the proximal strength (--mu), g = mean_i grad f_i(v),
x = mean_i x_i, G = mean_i grad f_i(x_i). One round (the non-accelerated method, for
general convex f, strong convexity taken as 0):
    x_i ~ argmin_x f_i(x) - <grad f_i(v) - g, x> + (lam/2)||x - v||^2   (DANE's problem at v)
    v' = v - G / lam
The local solve stops at the paper's accuracy rule ||grad F_i(x)|| <= (lam/2)||x - v|| (on
the step's minibatch, for K steps) or at K steps; exact solvers solve to --local-tol. Each
shard sends x_i and grad f_i(x_i): twice DANE's bytes in the solve phase.

`sdane-adaptive` (the paper's adaptive variant) needs no lam in advance: lam starts at --mu
and is halved after an accepted round, doubled after a rejected one, by the line-search test
    mean_i <grad f_i(x_i) - h_i(x), v - x_i> >= ||G||^2 / (2 lam),  h_i(x) = grad f_i(x) - grad f(x)
on a third phase at x (broadcast to the shards, which send back G's parts and the scalars of
the test). A rejected round keeps v and retries with the doubled lam. lam is the driver state
and reaches the shards as the round's data.
"""

from __future__ import annotations

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
from .parts.correction import GRAD_SAMPLE
from .parts.local_solver import MU, LocalProblem, StopRule
from .parts.noise_scale import gradient_figures, shard_gradient
from .parts.optimizer_state import refuse_kept_state
from .parts.row_figures import RowFigures
from .parts.setting_error import SettingError, setting
from .parts.solvers import SOLVER_PART, Solver

if TYPE_CHECKING:
    import torch

    from ..engine.protocol import Objective


@dataclass(frozen=True, kw_only=True)
class Sdane(RowFigures, Strategy):
    mu: float = MU.field()  # lam; above 0, and no default (checked below; well_posed.py)
    solver: Solver = field(metadata=SOLVER_PART)
    grad_sample: int = GRAD_SAMPLE.field()  # as DANE's
    seed: int = 0

    name: ClassVar[str] = "sdane"
    phases: ClassVar[tuple[str, ...]] = ("local_grad", "local_solve")

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_kept_state(self.solver, self.name)
        if self.mu is None or not self.mu > 0:  # unset too: no lam measured trains a network
            raise SettingError(
                f"{setting('algorithm', self.name)} needs {setting('mu')} above 0, its proximal "
                f"strength lam (the step on the prox-centre is 1 / lam); e.g. {setting('mu', 0.1)}"
            )

    def label(self) -> str:
        sample = f" grad-sample={self.grad_sample}" if self.grad_sample else ""
        return f"{self.name} mu={self.mu:g}{sample} {self.solver.label()}"

    def _lam(self, round_data: Any) -> float:
        return self.mu

    def _sampled(self, objective: Objective) -> Objective:
        return objective.fixed_sample(self.grad_sample, self.seed)

    def local(self, ctx: LocalContext) -> LocalOutput:
        if ctx.phase == 0:  # grad f_i at the prox-centre
            return shard_gradient(ctx.objective, self._sampled(ctx.objective), ctx.weights)
        assert ctx.previous is not None, "local_solve needs the shard's own gradient"
        lam, v = self._lam(ctx.round_data), ctx.weights
        linear = ctx.previous.tensors["grad"] - ctx.received["grad"]
        problem = LocalProblem(ctx.objective, linear=linear, anchor=v, mu=lam)
        solution = self.solver.solve(
            problem, v, ctx.rng, round_index=ctx.round_index, stop=_accuracy_rule(lam, v)
        )
        sampled = self._sampled(ctx.objective)
        _, grad_at_x = sampled.loss_and_grad(solution.weights)
        return LocalOutput(
            tensors={"weights": solution.weights, "grad": grad_at_x},
            metrics={"local_steps": float(solution.steps)},
            rows=solution.rows + sampled.num_samples,
        )

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        return Broadcast(tensors={"grad": mean.tensors["grad"]}, metrics=gradient_figures(mean))

    def update(self, end: RoundEnd) -> RoundUpdate:
        step = end.mean.tensors["grad"] / self.mu
        # How far the shards' solutions moved from the prox-centre, on average (a diagnostic).
        shift = float((end.mean.tensors["weights"] - end.weights).norm())
        return RoundUpdate(weights=end.weights - step, metrics={"solution_shift": shift})


def _accuracy_rule(lam: float, v: torch.Tensor) -> StopRule:
    """S-DANE's subproblem accuracy: ||grad F_i(x)|| <= (lam / 2) ||x - v||."""
    return lambda grad, x: float(grad.norm()) <= 0.5 * lam * float((x - v).norm())


@dataclass(frozen=True, kw_only=True)
class Lam:
    """The adaptive variant's round data and driver state: the current lam."""

    lam: float


@dataclass(frozen=True, kw_only=True)
class SdaneAdaptive(Sdane):
    name: ClassVar[str] = "sdane-adaptive"
    phases: ClassVar[tuple[str, ...]] = ("local_grad", "local_solve", "local_check")
    state_type: ClassVar[type | None] = Lam

    def init_state(self, weights: torch.Tensor) -> Lam:
        return Lam(lam=self.mu)

    def round_data(self, state: Lam) -> Lam:
        return state

    def _lam(self, round_data: Any) -> float:
        return round_data.lam

    def local(self, ctx: LocalContext) -> LocalOutput:
        import torch

        if ctx.phase < 2:
            output = super().local(ctx)
            if ctx.phase == 0:
                return output
            # Send x_i now, keep grad f_i(x_i) for the test: it is sent in the last phase.
            x_i, grad = output.tensors["weights"], output.tensors["grad"]
            return replace(output, tensors={"weights": x_i}, kept={"grad": grad})
        assert ctx.previous is not None, "local_check needs the shard's own solution"
        x_i, grad_x_i = ctx.previous.tensors["weights"], ctx.previous.kept["grad"]
        x, v = ctx.received["center"], ctx.weights
        sampled = self._sampled(ctx.objective)
        _, grad_i_at_x = sampled.loss_and_grad(x)
        # The mean over shards of these is the test's left side (see the module doc).
        lhs = float(torch.dot(grad_x_i - grad_i_at_x, v - x_i) + torch.dot(grad_i_at_x, v - x))
        return LocalOutput(
            tensors={"grad": grad_x_i}, metrics={"test_lhs": lhs}, rows=sampled.num_samples
        )

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        if phase == 0:
            return super().broadcast(phase, mean, round_data)
        return Broadcast(tensors={"center": mean.tensors["weights"]})

    def update(self, end: RoundEnd) -> RoundUpdate:
        import torch

        lam, big_g = end.state.lam, end.mean.tensors["grad"]
        accept = end.mean.metrics["test_lhs"] >= float(torch.dot(big_g, big_g)) / (2 * lam)
        metrics = {"sdane_rejected": float(not accept), "mu": lam}
        if not accept:  # retry from the same prox-centre with a stronger proximal term
            return RoundUpdate(weights=end.weights, state=Lam(lam=2 * lam), metrics=metrics)
        return RoundUpdate(
            weights=end.weights - big_g / lam, state=Lam(lam=lam / 2), metrics=metrics
        )
