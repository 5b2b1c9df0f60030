"""Plain-PyTorch training pieces shared by the DDP ranks (ddp_rank.py) and the single-process
trainer (single.py): the pipeline's data, initial weights and loss, without the pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import torch
from torch.nn import functional as F

from ...models.flat import load_state
from ...models.registry import ModelSpec, build_model
from ...pipeline.engine.plan import RunSetup
from ...pipeline.engine.round.augment import Augmentation, augment_batch
from ...pipeline.engine.round.shards import ShardData
from ...pipeline.setup.run_setup import initial_state
from ..common import training_set


def rank_seed(seed: int, rank: int) -> int:
    """Independent, reproducible minibatch streams per (run seed, rank)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def epoch_batches(
    num_rows: int, batch_size: int, per_epoch: int, seed: int
) -> Iterator[torch.Tensor]:
    """Row indices of each step: a fresh permutation per epoch, cut into per_epoch batches.

    A rank with more rows than per_epoch * batch_size leaves the rest of that epoch's
    permutation unused, so every rank takes the same number of steps.
    """
    rng = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(num_rows, generator=rng)
        for i in range(per_epoch):
            yield order[i * batch_size : (i + 1) * batch_size]


def load_rows(setup: RunSetup, shards: list[int], index: int, device: torch.device) -> ShardData:
    """The given training shards, loaded as the pipeline loads them and concatenated."""
    rows = training_set.load_rows(setup, shards, index)
    return replace(rows, x=rows.x.to(device), y=rows.y.to(device))


def load_test(setup: RunSetup, device: torch.device) -> ShardData:
    test = setup.load_test()
    return replace(test, x=test.x.to(device), y=test.y.to(device))


def initial_model(spec: ModelSpec, seed: int, device: torch.device) -> torch.nn.Module:
    """The architecture holding exactly initial_weights(spec, seed), as every Dask run starts."""
    weights, buffers = initial_state(spec, seed)
    return load_state(build_model(spec), weights, buffers).to(device)


def minibatch_loss(
    model: torch.nn.Module,
    data: ShardData,
    rows: torch.Tensor,
    l2: float,
    augment: tuple[Augmentation, torch.Generator] | None = None,
) -> torch.Tensor:
    """Mean minibatch loss plus the store's L2 term, as ShardObjective.batch_loss has it;
    `augment`: the minibatch flipped / cropped with draws from the generator."""
    x = data.x[rows]
    if augment is not None:
        x = augment_batch(x, *augment)
    out = model(x)
    if data.task == "classification":
        loss = F.cross_entropy(out, data.y[rows])
    else:
        loss = F.mse_loss(out.reshape(data.y[rows].shape), data.y[rows])
    if l2:
        loss = loss + l2 * sum(p.pow(2).sum() for p in model.parameters())
    return loss
