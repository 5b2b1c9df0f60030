"""How much of DANE's correction is signal: the shards' true gradient disagreement against
the error a --grad-sample adds to it, measured at given weights.

DANE's local problem tilts f_i by the correction c_i = g_i - eta g (eta = 1 here). With
--grad-sample N the run uses c_i^N = g_i^N - g^N, the gradients on N fixed rows of each
shard. On iid shards the true c_i is small, so the question is whether c_i^N still carries
it or is mostly sampling error:

    dane bench correction-noise --store S --model compact-cnn \
        [--checkpoint RUN/checkpoints/latest.pt] --sample 1000 --draws 5

prints, per shard, ||g||, ||c_i|| (full shards) and the mean over `draws` sample seeds of
||c_i^N|| and ||c_i^N - c_i|| (the sampling error), as JSON.
"""

from __future__ import annotations

from typing import Any

import torch

from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run
from ..common.training_set import shard_objectives


def measure(config: RunConfig, weights: torch.Tensor, sample: int, draws: int) -> dict[str, Any]:
    """The norms above for every shard of config.store at `weights`."""
    setup = prepare_run(config)
    objectives = shard_objectives(setup)
    full = [objective.loss_and_grad(weights)[1] for objective in objectives]
    mean = torch.stack(full).mean(0)
    sampled = [
        [o.fixed_sample(sample, seed).loss_and_grad(weights)[1] for o in objectives]
        for seed in range(draws)
    ]
    shards = []
    for i, g_i in enumerate(full):
        true = g_i - mean
        tilts = [draw[i] - torch.stack(draw).mean(0) for draw in sampled]
        shards.append(
            {
                "shard": i,
                "correction_norm": float(true.norm()),
                "sampled_correction_norm": _mean([float(t.norm()) for t in tilts]),
                "sampling_error_norm": _mean([float((t - true).norm()) for t in tilts]),
            }
        )
    return {"grad_norm": float(mean.norm()), "sample": sample, "draws": draws, "shards": shards}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
