"""FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.

Legend: w = weights at the start of the round, v_i = shard i's weights after K steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import RoundEnd, RoundUpdate
from .fedprox import SolveAndAverage
from .local_solver import LocalSolver


@dataclass(frozen=True, kw_only=True)
class FedAvg(SolveAndAverage):
    """Solve-and-average with K local steps; reports a pseudo-gradient norm."""

    solver: LocalSolver

    name: ClassVar[str] = "fedavg"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.solver, LocalSolver):
            raise ValueError(
                "--algorithm fedavg takes K local steps (--local-solver steps); for exact "
                "local solves use --algorithm one-shot or fedprox"
            )

    def update(self, end: RoundEnd) -> RoundUpdate:
        v = end.mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        pseudo_grad = (end.weights - v) / (self.solver.local_steps * self.solver.local_lr)
        return RoundUpdate(
            weights=v, state=end.state, metrics={"grad_norm": float(pseudo_grad.norm())}
        )
