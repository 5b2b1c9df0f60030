"""Synchronous minibatch SGD: the DistributedDataParallel equivalent.

Legend: w = weights, g = mean over shards of a minibatch gradient at w, b = momentum buffer.
One communication round = one step: b <- momentum*b + g; w <- w - local_lr*b.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import LocalContext, LocalOutput, RoundEnd, RoundUpdate, Strategy
from .parts.local_solver import BATCH_SIZE, LOCAL_LR, LR_SCHEDULE, MOMENTUM
from .parts.noise_scale import gradient_figures, shard_metrics
from .parts.row_figures import RowFigures
from .parts.schedule import lr_factor

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class SgdState:
    momentum: torch.Tensor  # the buffer b


@dataclass(frozen=True, kw_only=True)
class Sgd(RowFigures, Strategy):
    local_lr: float = LOCAL_LR.field()  # the step size (named like the shared flag)
    batch_size: int = BATCH_SIZE.field()
    momentum: float = MOMENTUM.field()
    lr_schedule: str = LR_SCHEDULE.field()
    rounds: int = 1  # the schedule's span (--rounds)

    name: ClassVar[str] = "sgd"
    phases: ClassVar[tuple[str, ...]] = ("local_grad",)
    state_type: ClassVar[type | None] = SgdState

    def label(self) -> str:
        schedule = "" if self.lr_schedule == "constant" else f" {self.lr_schedule}"
        return f"{self.name} lr={self.local_lr:g}{schedule} B={self.batch_size}"

    def init_state(self, weights: torch.Tensor) -> SgdState:
        import torch

        return SgdState(momentum=torch.zeros_like(weights))

    def local(self, ctx: LocalContext) -> LocalOutput:
        w = ctx.weights.detach().requires_grad_(True)
        objective = ctx.objective
        rows = objective.sample_rows(self.batch_size, ctx.rng)
        loss = objective.batch_loss(w, rows)
        loss.backward()
        g_i = w.grad.detach()
        # Fresh minibatches every round: the noise scale's estimate (noise_scale.py) as the
        # paper takes it, at no extra pass.
        metrics = {"train_loss": float(loss.detach())}
        metrics |= shard_metrics(g_i, len(rows), objective.num_samples)
        return LocalOutput(tensors={"grad": g_i}, metrics=metrics, rows=len(rows))

    def update(self, end: RoundEnd) -> RoundUpdate:
        g = end.mean.tensors["grad"]
        b = self.momentum * end.state.momentum + g
        return RoundUpdate(
            weights=end.weights - self.lr(end.round_index) * b,
            state=SgdState(momentum=b),
            metrics=gradient_figures(end.mean),
        )

    def lr(self, round_index: int) -> float:
        """The step of round `round_index` (from 1), after --lr-schedule."""
        return self.local_lr * lr_factor(self.lr_schedule, round_index, self.rounds)
