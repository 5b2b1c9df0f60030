"""Scoring a saved checkpoint on its store's test split, in this process (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import torch

from .round import tasks
from .run.checkpoint import load_checkpoint
from .setup.config import RunConfig
from .setup.run_setup import initial_weights, prepare_run


def evaluate_checkpoint(config: RunConfig, checkpoint: Path) -> tuple[int, dict[str, float]]:
    """(round, {loss, accuracy}) of the weights in `checkpoint`."""
    setup = prepare_run(config)
    saved = load_checkpoint(checkpoint)
    weights = saved["weights"].to(getattr(torch, config.dtype))
    if weights.numel() != initial_weights(setup.spec, 0).numel():
        raise ValueError(f"checkpoint {checkpoint} does not fit model {config.model!r}")
    test = setup.load_test()
    buffers = saved.get("buffers") or {}
    return int(saved["round"]), tasks.evaluate(setup.spec, test, weights, buffers)
