"""The loss of one model on one shard: full-shard loss and gradient, minibatches, evaluation.

Pure torch: used by every algorithm on the workers and by the single-process reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from ..models.flat import forward_flat

# Full-shard passes go in chunks so that activation memory stays bounded on big shards:
# on a CPU, the activations a chunk keeps for the backward pass stay near this many times
# the model's own bytes (the memory bound of the scaling benchmark allows 20 model copies in
# all); a GPU has memory to spare and wants big batches.
CHUNK_MODEL_COPIES = 8
CHUNK_BYTES_GPU = 256 * 2**20
CHUNK_ROWS = (16, 4096)
_PER_ROW: dict[tuple, int] = {}


def chunk_rows(model: nn.Module, x: torch.Tensor, num_params: int) -> int:
    """Rows per chunk of a full pass over x."""
    if x.device.type == "cuda":
        budget = CHUNK_BYTES_GPU
    else:
        budget = CHUNK_MODEL_COPIES * num_params * x.element_size()
    per_row = activation_bytes_per_row(model, x, num_params)
    return min(max(budget // max(per_row, 1), CHUNK_ROWS[0]), CHUNK_ROWS[1])


def activation_bytes_per_row(model: nn.Module, x: torch.Tensor, num_params: int) -> int:
    """Bytes that autograd keeps per input row, measured once on the meta device (no work)."""
    key = (id(model), tuple(x.shape[1:]), x.dtype)
    if key not in _PER_ROW:
        saved = [_saved_bytes(model, x, num_params, rows) for rows in (1, 2)]
        _PER_ROW[key] = saved[1] - saved[0]  # the weights, also saved, cancel out
    return _PER_ROW[key]


def _saved_bytes(model: nn.Module, x: torch.Tensor, num_params: int, rows: int) -> int:
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.device("meta"):
        w = torch.empty(num_params, dtype=x.dtype, requires_grad=True)
        batch = torch.empty((rows, *x.shape[1:]), dtype=x.dtype)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            forward_flat(model, w, batch)
    return total


class ShardObjective:
    """f_i(w): mean loss of `model` at flat weights w over the rows (x, y) of one shard.

    With `l2` = lambda > 0 every f_i includes lambda*||w||^2 (the paper's regulariser), so that
    f = mean_i f_i is the regularised objective and DANE's analysis applies shard by shard.
    The penalty is part of training losses and gradients, not of `evaluate` (a test loss).
    """

    def __init__(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: str, l2: float = 0.0
    ) -> None:
        self.model = model
        self.x = x
        self.y = y
        self.task = task
        self.l2 = l2
        self.chunk = chunk_rows(model, x, sum(p.numel() for p in model.parameters()))

    @property
    def num_samples(self) -> int:
        return int(self.x.shape[0])

    def _loss_sum(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = forward_flat(self.model, w, x)
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="sum")
        return F.mse_loss(out.reshape(y.shape), y, reduction="sum")

    def batch_loss(self, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Mean loss over `rows` (plus the L2 penalty), differentiable with respect to w."""
        return self._loss_sum(w, self.x[rows], self.y[rows]) / len(rows) + self._penalty(w)

    def _penalty(self, w: torch.Tensor) -> torch.Tensor | float:
        return self.l2 * torch.dot(w, w) if self.l2 else 0.0

    def fixed_sample(self, size: int, seed: int) -> ShardObjective:
        """This shard's first `size` rows in one fixed order drawn from `seed` (the whole
        shard if `size` is 0 or covers it): the same rows every time, never a new minibatch."""
        if not size or self.num_samples <= size:
            return self
        generator = torch.Generator().manual_seed(seed)
        rows = torch.randperm(self.num_samples, generator=generator)[:size].sort().values
        return ShardObjective(self.model, self.x[rows], self.y[rows], self.task, self.l2)

    @torch.no_grad()
    def loss(self, w: torch.Tensor) -> float:
        """Full-shard mean loss at w (the L2 penalty included), without a gradient."""
        total = 0.0
        for start in range(0, self.num_samples, self.chunk):
            stop = start + self.chunk
            total += float(self._loss_sum(w, self.x[start:stop], self.y[start:stop]))
        return total / self.num_samples + float(self._penalty(w))

    def loss_and_grad(self, w: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Full-shard mean loss and its gradient at w, in chunks of `self.chunk` rows."""
        w = w.detach().requires_grad_(True)
        total = 0.0
        for start in range(0, self.num_samples, self.chunk):
            stop = start + self.chunk
            loss = self._loss_sum(w, self.x[start:stop], self.y[start:stop]) / self.num_samples
            loss.backward()
            total += float(loss.detach())
        if self.l2:
            penalty = self._penalty(w)
            penalty.backward()
            total += float(penalty.detach())
        return total, w.grad.detach()

    def hessian_operator(self, w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """v -> H_i(w) v, the full-shard Hessian of f_i at w applied to v (exact solvers).

        v may also be a (k, d) batch; then row j of the result is H_i(w) v_j.

        The gradient graph is built once (create_graph) and kept, so each product is one
        backward pass; it holds the whole shard's graph, which is fine for the convex models.
        """
        w = w.detach().requires_grad_(True)
        total = self._penalty(w)
        for start in range(0, self.num_samples, self.chunk):
            stop = start + self.chunk
            chunk = self._loss_sum(w, self.x[start:stop], self.y[start:stop])
            total = total + chunk / self.num_samples
        (grad,) = torch.autograd.grad(total, w, create_graph=True)

        def product(v: torch.Tensor) -> torch.Tensor:
            # A (k, d) batch of vectors gives the k products (rows) in one vectorised pass.
            batched = v.ndim == 2
            (hv,) = torch.autograd.grad(grad, w, v, retain_graph=True, is_grads_batched=batched)
            return hv.detach()

        return product

    def sample_rows(self, batch_size: int, rng: torch.Generator) -> torch.Tensor:
        """A minibatch of distinct rows drawn with the given generator."""
        size = min(batch_size, self.num_samples)
        return torch.randperm(self.num_samples, generator=rng)[:size]

    @torch.no_grad()
    def evaluate(self, w: torch.Tensor) -> dict[str, float]:
        """Mean loss and (for classification) accuracy at w over the whole shard."""
        loss_sum, correct = 0.0, 0
        for start in range(0, self.num_samples, self.chunk):
            x, y = self.x[start : start + self.chunk], self.y[start : start + self.chunk]
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
