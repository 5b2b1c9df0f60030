"""The local problem every solve-then-average algorithm hands its shards, and a solve's result.

LocalProblem: min_v f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 on one shard, optionally
within a trust region ||v - anchor|| <= radius. DANE uses linear = grad f_i(w) - eta * g and
anchor = w; FedProx linear = 0; FedAvg also mu = 0. The solvers take it: K minibatch steps
(local_solver.py) or an exact method to a tolerance (exact_solver.py); both return a Solution.
Apart from the solvers, so that what a problem is reads without how it is solved; with the
per-shard figures of a solve (`solve_diagnostics`, below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .checks import non_negative
from .hyperparameters import Declaration

if TYPE_CHECKING:
    import torch

    from ...engine.protocol import Objective

# (gradient of the local problem at v on this step's minibatch, v) -> stop before stepping?
StopRule = Callable[["torch.Tensor", "torch.Tensor"], bool]


@dataclass(frozen=True)
class LocalProblem:
    """h(v) = f_i(v) - <linear, v> + (mu/2)||v - anchor||^2 (no term where None or 0),
    over ||v - anchor|| <= radius where radius > 0 (a trust region; 0: everywhere)."""

    objective: Objective
    linear: torch.Tensor | None = None
    anchor: torch.Tensor | None = None
    mu: float = 0.0
    radius: float = 0.0

    def project(self, v: torch.Tensor) -> None:
        """Pull v (in place) back onto the trust region's sphere where it has left it."""
        import torch

        if not self.radius or self.anchor is None:
            return
        distance = float(torch.linalg.vector_norm(v - self.anchor))
        if distance > self.radius:
            v.sub_(self.anchor).mul_(self.radius / distance).add_(self.anchor)

    def value(self, v: torch.Tensor) -> tuple[float, float]:
        """(h(v), f_i(v)) over the whole shard, without gradients."""
        f = h = self.objective.loss(v)  # tensor methods, not torch.*: no import of torch here
        if self.linear is not None:
            h -= float(self.linear.dot(v))
        if self.mu and self.anchor is not None:
            h += 0.5 * self.mu * float(((v - self.anchor) ** 2).sum())
        return h, f

    def value_and_grad(self, v: torch.Tensor) -> tuple[float, torch.Tensor, float]:
        """(h(v), grad h(v), f_i(v)) over the whole shard."""
        f, grad = self.objective.loss_and_grad(v)
        h = f
        if self.linear is not None:
            h -= float(self.linear.dot(v))
            grad = grad - self.linear
        if self.mu and self.anchor is not None:
            diff = v - self.anchor
            h += 0.5 * self.mu * float(diff.dot(diff))
            grad = grad + self.mu * diff
        return h, grad, f


@dataclass(frozen=True, kw_only=True)
class Solution:
    """A local solve's result: the solution and what it cost."""

    weights: torch.Tensor
    first_loss: float  # f_i on the first minibatch (a loss at the start), or f_i(start)
    steps: int  # minibatch steps taken, or the exact method's iterations
    rows: int  # rows of the shard read (images processed)
    state: Any = None  # the local optimizer's state after the solve, where it is kept


# Per-shard figures of a local solve, for finding out why a round went wrong.
#
# On heterogeneous shards DANE diverges because for a network the local problem
# h_i(v) = f_i(v) - <c_i, v> + (mu/2)||v - w||^2 (c_i = g_i - eta g, the correction) is
# unbounded below along directions where f_i is flat, so the K local steps run far along c_i.
# These figures show it per shard and round in metrics.jsonl (`shards`): the size of the tilt
# ||c_i||, how far the solve went ||v_i - w||, and h_i and f_i at the start and the end. On
# Dirichlet-0.5 Fashion-MNIST shards h_i fell by up to 16 while f_i fell by 1.7: nearly all of
# the descent was the linear term, a step of 8-16 against FedAvg's 2-4 (docs/results.md).
#
# h_i and f_i are measured on a fixed sample of the shard (DIAGNOSTIC_ROWS rows, chosen once
# from the run's seed, forward passes only); they read rows that are not counted as training
# `images`. They are taken on request (`diagnostics_every` = N: rounds N, 2N, ..., as
# --eval-every counts; 0: never), since four forward passes over 512 rows per shard are work
# that does not shrink with the model and sits on every round's critical path otherwise.
DIAGNOSTIC_ROWS = 512

# One declaration, taken by each algorithm that reports the figures (DANE, FedDyn).
DIAGNOSTICS_EVERY = Declaration(
    default=0,
    rule=non_negative,
    exclusive=True,
    help="DANE, FedDyn: each shard's solve figures (h_i, f_i on 512 rows at both ends, the "
    "tilt and step norms) every N rounds, in metrics.jsonl's `shards`; 0: never.",
)


def due(every: int, round_index: int) -> bool:
    """Whether round `round_index` (from 1) takes the figures: every N-th, never for 0."""
    return every > 0 and round_index % every == 0


def solve_diagnostics(
    problem: LocalProblem, start: torch.Tensor, end: torch.Tensor, seed: int
) -> dict[str, float]:
    """The figures above for a solve of `problem` from `start` to `end`."""
    on_sample = LocalProblem(
        problem.objective.fixed_sample(DIAGNOSTIC_ROWS, seed),
        linear=problem.linear,
        anchor=problem.anchor,
        mu=problem.mu,
    )
    h_start, f_start = on_sample.value(start)
    h_end, f_end = on_sample.value(end)
    correction = 0.0 if problem.linear is None else float(problem.linear.norm())
    return {
        "correction_norm": correction,
        "step_norm": float((end - start).norm()),
        "local_loss_start": h_start,
        "local_loss_end": h_end,
        "shard_loss_start": f_start,
        "shard_loss_end": f_end,
    }
