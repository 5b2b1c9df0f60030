"""The loss of one model on one shard: full-shard loss and gradient, minibatches, evaluation.

Pure torch: used by every algorithm on the workers and by the single-process reference.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from dask_dane.models.flat import forward_flat

# Rows per forward pass for full-shard passes: bounds activation memory on big shards.
FULL_PASS_CHUNK = 2048


class ShardObjective:
    """f_i(w): mean loss of `model` at flat weights w over the rows (x, y) of one shard."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: str) -> None:
        self.model = model
        self.x = x
        self.y = y
        self.task = task

    @property
    def num_samples(self) -> int:
        return int(self.x.shape[0])

    def _loss_sum(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = forward_flat(self.model, w, x)
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="sum")
        return F.mse_loss(out.reshape(y.shape), y, reduction="sum")

    def batch_loss(self, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Mean loss over `rows`, differentiable with respect to w."""
        return self._loss_sum(w, self.x[rows], self.y[rows]) / len(rows)

    def loss_and_grad(self, w: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Full-shard mean loss and its gradient at w, in chunks of FULL_PASS_CHUNK rows."""
        w = w.detach().requires_grad_(True)
        total = 0.0
        for start in range(0, self.num_samples, FULL_PASS_CHUNK):
            stop = start + FULL_PASS_CHUNK
            loss = self._loss_sum(w, self.x[start:stop], self.y[start:stop]) / self.num_samples
            loss.backward()
            total += float(loss.detach())
        return total, w.grad.detach()

    def sample_rows(self, batch_size: int, rng: torch.Generator) -> torch.Tensor:
        """A minibatch of distinct rows drawn with the given generator."""
        size = min(batch_size, self.num_samples)
        return torch.randperm(self.num_samples, generator=rng)[:size]

    @torch.no_grad()
    def evaluate(self, w: torch.Tensor) -> dict[str, float]:
        """Mean loss and (for classification) accuracy at w over the whole shard."""
        loss_sum, correct = 0.0, 0
        for start in range(0, self.num_samples, FULL_PASS_CHUNK):
            x, y = self.x[start : start + FULL_PASS_CHUNK], self.y[start : start + FULL_PASS_CHUNK]
            out = forward_flat(self.model, w, x)
            if self.task == "classification":
                loss_sum += float(F.cross_entropy(out, y, reduction="sum"))
                correct += int((out.argmax(dim=1) == y).sum())
            else:
                loss_sum += float(F.mse_loss(out.reshape(y.shape), y, reduction="sum"))
        metrics = {"loss": loss_sum / self.num_samples}
        if self.task == "classification":
            metrics["accuracy"] = correct / self.num_samples
        return metrics
