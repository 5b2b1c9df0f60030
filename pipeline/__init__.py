"""The driver side: configuration, cluster, round graphs, reference runner, checkpoints.

The names below are the engine's declared surface for code outside it (bench/, above all):
bench/ reaches the engine only through them and the package root's API (dask_dane.train,
prepare, load, TrainResult), and tests/test_layout.py holds it to that. They are imported on
first use, so that importing one of them does not pull in distributed and torch for all.
"""

from __future__ import annotations

import importlib
from typing import Any

# name: (module under pipeline/, name there)
SURFACE: dict[str, tuple[str, str]] = {
    # configuration and presets
    "RunConfig": ("config", "RunConfig"),
    "check_settings": ("config", "check_settings"),
    "read_toml": ("config", "read_toml"),
    "to_toml": ("config", "to_toml"),
    # a run: its set-up, the Dask loop, the single-process reference, what they write
    "RunSetup": ("run_setup", "RunSetup"),
    "prepare_run": ("run_setup", "prepare_run"),
    "prepare_store": ("run_setup", "prepare_store"),
    "initial_state": ("run_setup", "initial_state"),
    "initial_weights": ("run_setup", "initial_weights"),
    "make_client": ("cluster", "make_client"),
    "run_training": ("loop", "train"),
    "Callbacks": ("loop", "Callbacks"),
    "TrainingDiverged": ("loop", "TrainingDiverged"),
    "run_reference": ("reference", "run_reference"),
    "RunDir": ("rundir", "RunDir"),
    "read_metrics": ("metrics", "read_metrics"),
    "load_checkpoint": ("checkpoint", "load_checkpoint"),
    "atomic_write_bytes": ("checkpoint", "atomic_write_bytes"),
    "pyplot": ("report", "pyplot"),
    "save_figure": ("report", "save_figure"),
    # what the single-process baselines share with the workers, so they train the same way
    "ShardData": ("shards", "ShardData"),
    "evaluate": ("tasks", "evaluate"),
    "architecture": ("shards", "architecture"),
    "resolve_device": ("shards", "resolve_device"),
    "Augmentation": ("augment", "Augmentation"),
    "augment_batch": ("augment", "augment_batch"),
    "parse_augment": ("augment", "parse_augment"),
    "lr_factor": ("algorithms.schedule", "lr_factor"),
    "LocalProblem": ("algorithms.local_solver", "LocalProblem"),
    "ExactSolver": ("algorithms.exact_solver", "ExactSolver"),
    # what the benchmarks measure inside a round (introspect.py)
    "shard_placement": ("aggregate", "shard_placement"),
    "use_tree": ("topology", "use_tree"),
    "fan_out_plan": ("topology", "fan_out_plan"),
    "round_graph": ("introspect", "round_graph"),
    "read_first_rows": ("introspect", "read_first_rows"),
    "activation_bytes_per_row": ("objective", "activation_bytes_per_row"),
}
__all__ = sorted(SURFACE)


def __getattr__(name: str) -> Any:
    if name not in SURFACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = SURFACE[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
