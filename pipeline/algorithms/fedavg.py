"""FedAvg / local SGD (McMahan et al. 2017): K local steps per shard, then average weights.

Legend: w = weights at the start of the round, v_i = shard i's weights after K steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import RoundEnd, RoundUpdate
from .fedprox import SolveAndAverage
from .parts.checks import checked, momentum_range, one_of, positive
from .parts.local_solver import LocalSolver
from .parts.server import SERVER_LR_RULES, check_server_lr
from .parts.setting_error import SettingError, setting


@dataclass(frozen=True, kw_only=True)
class FedAvg(SolveAndAverage):
    """Solve-and-average with K local steps; reports a pseudo-gradient norm."""

    solver: LocalSolver
    server_momentum: float = checked(momentum_range, default=0.0)  # FedAvgM above 0
    server_lr: float = checked(positive, exclusive=True, default=1.0)
    server_lr_rule: str = checked(one_of(*SERVER_LR_RULES), exclusive=True, default="fixed")

    name: ClassVar[str] = "fedavg"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.solver, LocalSolver):
            raise SettingError(
                f"{setting('algorithm', 'fedavg')} takes K local steps "
                f"({setting('local_solver', 'steps')}); for exact local solves use "
                f"{setting('algorithm')} one-shot or fedprox"
            )
        check_server_lr(self.server_lr, self.server_lr_rule)

    def update(self, end: RoundEnd) -> RoundUpdate:
        v = end.mean.tensors["weights"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        pseudo_grad = (end.weights - v) / (self.solver.local_steps * self.solver.local_lr)
        weights, state, metrics = self.server_step_from(end)
        return RoundUpdate(
            weights=weights,
            state=state,
            metrics={"grad_norm": float(pseudo_grad.norm()), **metrics},
        )
