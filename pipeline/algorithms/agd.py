"""Distributed accelerated gradient descent (Nesterov), one averaged full gradient per round.

Legend: x = the iterate, y = the extrapolated point where the gradient is taken,
g = mean_i grad f_i(y), local_lr = step size (1/L), momentum = Nesterov's beta
((sqrt(k)-1)/(sqrt(k)+1) for a condition number k). One round: x' = y - local_lr * g;
y' = x' + momentum * (x' - x). The weights the pipeline sends (and checkpoints and scores)
are y, since that is where the shards must evaluate their gradients; x is the driver state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import RoundEnd, RoundUpdate
from .gd import Gd
from .parts.local_solver import MOMENTUM

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class AgdState:
    x: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class Agd(Gd):
    """Gd's shard work (one full gradient); the update extrapolates with `momentum`."""

    momentum: float = MOMENTUM.field()

    name: ClassVar[str] = "agd"  # full_batch as Gd: no minibatch steps
    state_type: ClassVar[type | None] = AgdState

    def label(self) -> str:
        return f"{super().label()} momentum={self.momentum:g}"

    def init_state(self, weights: torch.Tensor) -> AgdState:
        return AgdState(x=weights.clone())

    def update(self, end: RoundEnd) -> RoundUpdate:
        g = end.mean.tensors["grad"]
        x_next = end.weights - self.local_lr * g
        y_next = x_next + self.momentum * (x_next - end.state.x)
        return RoundUpdate(
            weights=y_next, state=AgdState(x=x_next), metrics={"grad_norm": float(g.norm())}
        )
