"""The loss of one model on one shard: full-shard loss and gradient, minibatches, evaluation.
Pure torch: used by every algorithm on the workers and by the single-process reference.

Models with layers that act differently in training (BatchNorm, dropout) are trained in
training mode everywhere the algorithms look: the local steps and the full-shard passes (DANE's
loss and gradient phase, line searches, safeguards) alike, so that DANE's correction grad
f_i(w) is the gradient of the very objective the local steps minimise. For BatchNorm that
objective depends on the batch, so full passes go over batches of the local steps' size
(ModelSpec.train_batch; never one row), in the shard's fixed order, with copies of the running
statistics: only local steps update this shard's statistics (`buffers`), which the pipeline
then averages (tasks.run_local). Dropout masks and augmentations are drawn from generators
seeded from the task's seed: the local steps' in step order, every full pass the same fixed
draw, so f_i is one function within a round. Evaluation runs in eval mode with the combined
statistics.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ....datasets.rows.features import Features, StoredRows
from ....datasets.rows.streamed import ChunkWindow
from ....models.flat import Buffers, forward_flat
from .activations import activation_bytes_per_row
from .augment import Augmentation, augment_batch

# Full-shard passes go in chunks so that activation memory stays bounded on big shards:
# on a CPU, the activations a chunk keeps for the backward pass stay near this many times
# the model's own bytes (the memory bound of the scaling benchmark allows 20 model copies in
# all); a GPU has memory to spare and wants big batches.
CHUNK_MODEL_COPIES = 8
CHUNK_BYTES_GPU = 256 * 2**20
CHUNK_ROWS = (16, 4096)
# Dropout draws from torch's global generator: seeding it and running the forward pass happen
# under one lock, so that worker threads (--threads-per-worker) do not interleave draws.
_GLOBAL_RNG = threading.Lock()


def derived_seed(*parts: int) -> int:
    """An independent, reproducible seed for the given integers (numpy's SeedSequence)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def mode_dependent(model: nn.Module) -> tuple[bool, bool]:
    """(uses batch statistics in training: BatchNorm, draws at random in training: dropout)."""
    modules = list(model.modules())
    batch = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in modules)
    random = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in modules)
    return batch, random


def chunk_rows(model: nn.Module, x: Features, num_params: int) -> int:
    """Rows per chunk of a full pass over x."""
    if x.device.type == "cuda":
        budget = CHUNK_BYTES_GPU
    else:
        budget = CHUNK_MODEL_COPIES * num_params * x.element_size()
    per_row = activation_bytes_per_row(model, x, num_params)
    return min(max(budget // max(per_row, 1), CHUNK_ROWS[0]), CHUNK_ROWS[1])


def full_pass_batches(rows: int, batch: int) -> int:
    """ceil(rows / batch), or floor where that leaves a 1-row batch (BatchNorm refuses one in
    training): c near-equal spans all hold >= 2 rows iff rows >= 2c, so others stay as were."""
    count = -(-rows // batch)
    return count if rows >= 2 * count else max(rows // batch, 1)


class ShardObjective:
    """f_i(w): mean loss of `model` at flat weights w over the rows (x, y) of one shard.

    With `l2` = lambda > 0 every f_i includes lambda*||w||^2 (the paper's regulariser), so that
    f = mean_i f_i is the regularised objective and DANE's analysis applies shard by shard.
    The penalty is part of training losses and gradients, not of `evaluate` (a test loss).
    """

    def __init__(
        self,
        model: nn.Module,
        x: Features,
        y: torch.Tensor,
        task: str,
        l2: float = 0.0,
        *,
        buffers: Buffers | None = None,
        train_batch: int = 0,
        augmentation: Augmentation | None = None,
        seed: int = 0,
        precision: str = "fp32",
    ) -> None:
        self.model = model
        self.x = StoredRows.of(x)  # indexing gives normalised run-dtype rows (features.py)
        self.y = y
        self.task = task
        self.l2 = l2
        self.chunk = chunk_rows(model, x, sum(p.numel() for p in model.parameters()))
        self.buffers = buffers if buffers is not None else {}  # this shard's own copy
        self.train_batch = train_batch
        self.augmentation = augmentation or Augmentation()
        self.seed = seed
        self.precision = precision
        self.batch_dependent, self.stochastic = mode_dependent(model)
        # Local steps' dropout masks and augmentations, in step order.
        self.step_rng = torch.Generator().manual_seed(derived_seed(seed, 1))
        self.buffers_updated = False  # a local step has moved the running statistics
        self.window: ChunkWindow | None = None  # a streamed shard's minibatch window

    @property
    def plain(self) -> bool:
        """No modes, no buffers, no augmentation: the model is a pure function of w and x."""
        return not (
            self.batch_dependent or self.stochastic or self.buffers or self.augmentation.active
        )

    def _pass_losses(self, w: torch.Tensor) -> Iterator[torch.Tensor]:
        """A full pass at w: the loss summed over each of its row ranges in order (memory-sized
        chunks, or near-equal local-step batches), each with its fixed draws."""
        if self.batch_dependent and self.train_batch:
            count = full_pass_batches(self.num_samples, self.train_batch)
            bounds = np.linspace(0, self.num_samples, count + 1).round().astype(int).tolist()
        else:
            bounds = [*range(0, self.num_samples, self.chunk), self.num_samples]
        for start, stop in itertools.pairwise(bounds):
            out = self._forward(w, self.x[start:stop], step=False, at=start)
            yield self._summed_loss(out, self.y[start:stop])

    def _forward(
        self, w: torch.Tensor, x: torch.Tensor, *, step: bool, train: bool = True, at: int = 0
    ) -> torch.Tensor:
        """The model's output at w, in w's dtype. `step`: a local step (updates the running
        statistics, draws from step_rng); else a full pass at row `at` (fixed draws, statistics
        kept). bf16 autocasts the layers (on CPU too); w, its gradient and the loss stay fp32."""
        if self.precision == "fp32":
            return self._forward_in_dtype(w, x, step=step, train=train, at=at)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            out = self._forward_in_dtype(w, x, step=step, train=train, at=at)
        return out.to(w.dtype)

    def _forward_in_dtype(
        self, w: torch.Tensor, x: torch.Tensor, *, step: bool, train: bool, at: int
    ) -> torch.Tensor:
        if self.plain:
            return forward_flat(self.model, w, x)
        rng = self.step_rng if step else torch.Generator().manual_seed(derived_seed(self.seed, at))
        if train and self.augmentation.active:
            x = augment_batch(x, self.augmentation, rng)
        self.model.train(train)
        buffers = self.buffers
        if train and not step:
            buffers = {name: value.clone() for name, value in buffers.items()}
        self.buffers_updated |= step and bool(buffers)
        if not (train and self.stochastic):
            return forward_flat(self.model, w, x, buffers)
        dropout_seed = int(torch.randint(2**62, (1,), generator=rng))
        devices = [x.device] if x.device.type == "cuda" else []
        with _GLOBAL_RNG, torch.random.fork_rng(devices=devices):
            torch.manual_seed(dropout_seed)
            return forward_flat(self.model, w, x, buffers)

    @property
    def num_samples(self) -> int:
        return int(self.x.shape[0])

    def _summed_loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The loss of the model's outputs `out` summed over their rows."""
        if self.task == "classification":
            return F.cross_entropy(out, y, reduction="sum")
        return F.mse_loss(out.reshape(y.shape), y, reduction="sum")

    def batch_loss(self, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Mean loss over `rows` (plus the L2 penalty), differentiable with respect to w."""
        loss = self._summed_loss(self._forward(w, self.x[rows], step=True), self.y[rows])
        return loss / len(rows) + self._penalty(w)

    def _penalty(self, w: torch.Tensor) -> torch.Tensor | float:
        return self.l2 * torch.dot(w, w) if self.l2 else 0.0

    def fixed_sample(self, size: int, seed: int) -> ShardObjective:
        """This shard's first `size` rows in one fixed order drawn from `seed` (the whole
        shard if `size` is 0 or covers it): the same rows every time, never a new minibatch."""
        if not size or self.num_samples <= size:
            return self
        generator = torch.Generator().manual_seed(seed)
        rows = torch.randperm(self.num_samples, generator=generator)[:size].sort().values
        return self._subset(rows)

    def row_range(self, start: int, stop: int) -> ShardObjective:
        """The same objective on rows start..stop-1 alone (half-samples, correction.py)."""
        return self._subset(slice(start, stop))

    def _subset(self, rows: torch.Tensor | slice) -> ShardObjective:
        return ShardObjective(
            self.model,
            self.x.take(rows),
            self.y[rows],
            self.task,
            self.l2,
            buffers=self.buffers,
            train_batch=self.train_batch,
            augmentation=self.augmentation,
            seed=self.seed,
            precision=self.precision,
        )

    @torch.no_grad()
    def loss(self, w: torch.Tensor) -> float:
        """Full-shard mean loss at w (the L2 penalty included), without a gradient."""
        total = 0.0
        for loss in self._pass_losses(w):
            total += float(loss)
        return total / self.num_samples + float(self._penalty(w))

    def loss_and_grad(self, w: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Full-shard mean loss and its gradient at w, in chunks of `self.chunk` rows."""
        w = w.detach().requires_grad_(True)
        total = 0.0
        for loss in self._pass_losses(w):
            loss = loss / self.num_samples
            loss.backward()
            total += float(loss.detach())
        if self.l2:
            penalty = self._penalty(w)
            penalty.backward()
            total += float(penalty.detach())
        return total, w.grad.detach()

    def hessian_operator(self, w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """v -> H_i(w) v, the full-shard Hessian of f_i at w applied to v (exact solvers); a
        (k, d) batch v gives row j = H_i(w) v_j, all k in one vectorised pass.

        The gradient graph is built once (create_graph) and kept, so each product is one
        backward pass; it holds the whole shard's graph, which is fine for the convex models.
        """
        w = w.detach().requires_grad_(True)
        total = self._penalty(w)
        for chunk in self._pass_losses(w):
            total = total + chunk / self.num_samples
        (grad,) = torch.autograd.grad(total, w, create_graph=True)

        def product(v: torch.Tensor) -> torch.Tensor:
            batched = v.ndim == 2
            (hv,) = torch.autograd.grad(grad, w, v, retain_graph=True, is_grads_batched=batched)
            return hv.detach()

        return product

    def sample_rows(self, batch_size: int, rng: torch.Generator) -> torch.Tensor:
        """A minibatch of distinct rows drawn with the given generator; on a streamed shard,
        from a window of its chunks that moves as the round's steps go (streamed.py)."""
        size = min(batch_size, self.num_samples)
        if isinstance(self.x, StoredRows):
            return torch.randperm(self.num_samples, generator=rng)[:size]
        self.window = self.window or ChunkWindow(self.x, rng)  # this objective's round only
        return self.window.sample(size, rng)

    @torch.no_grad()
    def evaluate_sums(self, w: torch.Tensor) -> tuple[float, int, int]:
        """(loss summed over rows, correct predictions, rows) at w over the whole shard, in
        eval mode, in chunks of `self.chunk` rows; sums, so that pieces combine exactly."""
        loss_sum, correct = 0.0, 0
        for start in range(0, self.num_samples, self.chunk):
            x, y = self.x[start : start + self.chunk], self.y[start : start + self.chunk]
            out = self._forward(w, x, step=False, train=False)
            loss_sum += float(self._summed_loss(out, y))
            if self.task == "classification":
                correct += int((out.argmax(dim=1) == y).sum())
        return loss_sum, correct, self.num_samples
