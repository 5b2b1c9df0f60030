"""How much of DANE's correction is signal: the shards' true gradient disagreement against
the error a --grad-sample adds to it, measured at given weights.

DANE's local problem tilts f_i by the correction c_i = g_i - eta g (eta = 1 here). With
--grad-sample N the run uses c_i^N = g_i^N - g^N, the gradients on N fixed rows of each
shard. On iid shards the true c_i is small, so the question is whether c_i^N still carries
it or is mostly sampling error:

    python -m dask_dane.bench.correction_noise --store S --model compact-cnn \
        [--checkpoint RUN/checkpoints/latest.pt] --sample 1000 --draws 5

prints, per shard, ||g||, ||c_i|| (full shards) and the mean over `draws` sample seeds of
||c_i^N|| and ||c_i^N - c_i|| (the sampling error), as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from ..pipeline.checkpoint import load_checkpoint
from ..pipeline.config import RunConfig
from ..pipeline.run_setup import initial_weights, prepare_run
from ..pipeline.shards import make_objective
from ..pipeline.tasks import load_shard


def measure(config: RunConfig, weights: torch.Tensor, sample: int, draws: int) -> dict[str, Any]:
    """The norms above for every shard of config.store at `weights`."""
    setup = prepare_run(config)
    objectives = [
        make_objective(setup.spec, load_shard(**setup.shard_args(i)))
        for i in range(len(setup.store.shards))
    ]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--model", default="compact-cnn")
    parser.add_argument("--checkpoint", help="weights to measure at (default: round 0's)")
    parser.add_argument("--sample", type=int, default=1000, help="rows of --grad-sample")
    parser.add_argument("--draws", type=int, default=5, help="sample seeds to average over")
    args = parser.parse_args()
    config = RunConfig(store=args.store, model=args.model).validate()
    if args.checkpoint:
        weights = load_checkpoint(Path(args.checkpoint))["weights"]
    else:
        weights = initial_weights(prepare_run(config).spec, config.seed)
    result = measure(config, weights, args.sample, args.draws)
    print(json.dumps({**result, "checkpoint": args.checkpoint}, indent=1))


if __name__ == "__main__":
    main()
