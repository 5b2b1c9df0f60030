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
    "RunConfig": ("setup.config", "RunConfig"),
    "check_settings": ("setup.config", "check_settings"),
    "read_toml": ("setup.config", "read_toml"),
    "to_toml": ("setup.config", "to_toml"),
    "with_default": ("algorithms.parts.hyperparameters", "with_default"),  # help + [default]
    # a run: its set-up, the Dask loop, the single-process reference, what they write
    "plan_run": ("plan", "plan_run"),
    "RunSetup": ("setup.run_setup", "RunSetup"),
    "prepare_run": ("setup.run_setup", "prepare_run"),
    "prepare_store": ("setup.run_setup", "prepare_store"),
    "initial_state": ("setup.run_setup", "initial_state"),
    "initial_weights": ("setup.run_setup", "initial_weights"),
    "make_client": ("run.cluster", "make_client"),
    "train": ("run.loop", "train"),  # a RunConfig's run (dask_dane.train: keywords)
    "Callbacks": ("run.loop", "Callbacks"),
    "TrainingDiverged": ("run.loop", "TrainingDiverged"),
    "run_reference": ("reference", "run_reference"),
    "RunDir": ("run.rundir", "RunDir"),
    "read_metrics": ("run.metrics", "read_metrics"),
    "load_checkpoint": ("run.checkpoint", "load_checkpoint"),
    "atomic_write_bytes": ("run.checkpoint", "atomic_write_bytes"),
    "pyplot": ("report", "pyplot"),
    "save_figure": ("report", "save_figure"),
    # what the single-process baselines share with the workers, so they train the same way
    "ShardData": ("round.shards", "ShardData"),
    "evaluate": ("round.tasks", "evaluate"),
    "architecture": ("round.shards", "architecture"),
    "resolve_device": ("round.shards", "resolve_device"),
    "Augmentation": ("round.augment", "Augmentation"),
    "augment_batch": ("round.augment", "augment_batch"),
    "parse_augment": ("round.augment", "parse_augment"),
    "lr_factor": ("algorithms.parts.schedule", "lr_factor"),
    "steps_for_epochs": ("algorithms.parts.local_steps_schedule", "steps_for_epochs"),
    "LocalProblem": ("algorithms.parts.local_solver", "LocalProblem"),
    "ExactSolver": ("algorithms.parts.exact_solver", "ExactSolver"),
    # what the benchmarks build to look inside a round (bench/scaling/introspect.py)
    "shard_placement": ("round.aggregate", "shard_placement"),
    "build_round": ("round.graph", "build_round"),
    "ChainLink": ("round.graph", "ChainLink"),
    "keys_in": ("round.graph", "keys_in"),
    "round_static": ("run.run_state", "round_static"),
    "load_shard": ("round.shards", "load_shard"),
    "activation_bytes_per_row": ("round.objective", "activation_bytes_per_row"),
    # what bench/scaling/wire.py sends between workers, and the in-band form it compares
    "RoundResult": ("round.tasks", "RoundResult"),
    "WorkerPhase": ("round.worker_round", "WorkerPhase"),
    "Partial": ("round.aggregate", "Partial"),
    "use_frames": ("round.wire", "use_frames"),
    # what bench/scaling/gloo.py times: a segment's group, formed as the engine forms it
    "GroupSpec": ("round.group", "GroupSpec"),
    "form_group": ("run.segment", "form_group"),
}
__all__ = sorted(SURFACE)


def __getattr__(name: str) -> Any:
    if name not in SURFACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = SURFACE[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
