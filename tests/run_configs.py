"""The run settings the tests train with, built in one place: `run_config(store, *presets,
out=..., **settings)`, and the presets that several test files share. Each file keeps its own
settings as a preset beside its tests. Not a test file: they import it by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dask_dane.pipeline.setup.config import RunConfig

# The runs numpy computes by hand (tests/engine/test_oracles.py, test_wiring.py,
# tests/algorithms/test_server_step.py): a float64 linear model, unclipped steps on every row
# of each shard (no validation split).
BY_HAND: Mapping[str, Any] = {
    "model": "linear",
    "dtype": "float64",
    "seed": 3,
    "local_clip": 0.0,
    "val_fraction": 0.0,
}
# Multinomial logistic regression on digits-tabular (the `table` fixture, tests/engine/
# conftest.py), float64: three rounds that every algorithm trains (test_torch_collective.py).
LOGISTIC: Mapping[str, Any] = {
    "model": "logistic",
    "dtype": "float64",
    "l2": 1e-3,
    "rounds": 3,
    "seed": 4,
}


def run_config(
    store: str | Path | Any,
    *presets: Mapping[str, Any],
    out: str | Path | None = None,
    **settings: Any,
) -> RunConfig:
    """A validated RunConfig on `store` (a path, or a written store's StoreInfo), writing to
    `out` (None: no run folder); its settings are the `presets`' and then `settings`, each
    overriding those before it."""
    merged: dict[str, Any] = {}
    for preset in presets:
        merged.update(preset)
    merged.update(settings)
    path = getattr(store, "path", store)
    return RunConfig(store=str(path), out=None if out is None else str(out), **merged).validate()
