"""FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.

Legend: w = weights at the start of the round, v_i = shard i's weights after K steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .base import RoundEnd, RoundUpdate
from .parts.local_solver import LocalSolver
from .parts.server import SERVER_PART, ServerStep
from .parts.setting_error import SettingError, setting
from .parts.solve_and_average import SolveAndAverage


@dataclass(frozen=True, kw_only=True)
class FedAvg(SolveAndAverage):
    """Solve-and-average with K local steps; reports a pseudo-gradient norm."""

    server: ServerStep = field(
        default_factory=ServerStep, metadata=SERVER_PART
    )  # FedAvgM with server momentum above 0

    name: ClassVar[str] = "fedavg"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.solver, LocalSolver):
            raise SettingError(
                f"{setting('algorithm', 'fedavg')} takes K local steps "
                f"({setting('local_solver', 'steps')}); for exact local solves use "
                f"{setting('algorithm')} one-shot or fedprox"
            )

    def update(self, end: RoundEnd) -> RoundUpdate:
        v = end.mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        steps = self.solver.steps(end.round_index)  # K_t (--local-steps-schedule)
        pseudo_grad = (end.weights - v) / (steps * self.solver.base_lr)
        weights, state, metrics = self.server_step_from(end)
        return RoundUpdate(
            weights=weights,
            state=state,
            metrics={"grad_norm": float(pseudo_grad.norm()), **metrics},
        )
