"""What a run is made of, planned and checked once: store, model, strategy, shard layout.

prepare_run opens the store, resolves the settings on it, builds the strategy and builds
the model once (model_check.py: checked, initialised under the run's seed, run on a batch);
the RunSetup it returns carries the built model's weights and buffers, so nothing after it
builds the model again on the driver. Shared by the Dask driver (loop.py) and the
single-process reference (reference.py), so both start from identical weights and read
identical shards.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...datasets.partition import PartitionSpec
from ...datasets.sources import SourceOptions, load_source
from ...datasets.store import StoreInfo, open_store, write_store
from ...models.flat import Buffers, model_state
from ...models.registry import ModelSpec, build_model, user_spec_builder
from ...models.user import is_import_path, to_bytes
from ..engine.plan import RunSetup, shard_load_args
from ..engine.round.augment import parse_augment
from ..engine.round.shards import load_shard
from .config import RunConfig
from .epochs import strategy_on_store, with_epochs_resolved, with_strategy_resolved
from .model_check import CHECK_ROWS, initial_model


def ensure_default_store(config: RunConfig) -> Path:
    """Prepare the embedded default store (digits, one shard per worker) on first use, in
    the cache; reuse it afterwards. One line on stderr says which, and where: the user never
    named that folder (a plain print, as the CLI and the API both show it before a run)."""
    root = Path(os.environ.get("DANE_CACHE", Path.home() / ".cache" / "dask-dane"))
    path = root / f"digits-{config.workers}shards-seed{config.seed}.zarr"
    doing = "using the digits store in" if path.exists() else "writing the digits store once, to"
    print(f"{doing} {path} (set DANE_CACHE to keep it elsewhere)", file=sys.stderr)
    return prepare_store("digits", path, shards=config.workers, seed=config.seed)


def prepare_store(
    source: str,
    path: str | Path,
    *,
    shards: int,
    seed: int = 0,
    options: SourceOptions | None = None,
    replace: bool = False,
) -> Path:
    """`dane prepare SOURCE --shards N --seed S` as a call: write the store (iid shards)
    unless it exists (or always, `replace`); `options` are the source's (its seed is `seed`
    unless given)."""
    path = Path(path)
    if replace or not path.exists():
        raw = load_source(source, options or SourceOptions(seed=seed))
        spec = PartitionSpec(kind="iid", num_shards=shards, seed=seed)
        try:
            write_store(raw, spec, path, force=replace)
        except ValueError:
            # Another process placed the store while this one wrote it (two first runs at
            # once on the embedded default): written whole and renamed into place, it is used.
            if replace or not path.exists():
                raise
    return path


def prepare_run(config: RunConfig, builder: Callable[..., nn.Module] | None = None) -> RunSetup:
    """Check that store, model and settings fit together; ValueError with the fix if not.

    `builder` is a Python callable given for the model (dask_dane.train(model=fn)); it stands
    for config.model, which then records its name.
    """
    if config.store is None:
        raise ValueError("no store given; pass a store path or use the embedded default")
    store = open_store(config.store)
    config = with_epochs_resolved(config, store)
    _check_dtype_holds(store, config.dtype)
    if parse_augment(config.augment).active and len(store.sample_shape) != 3:
        raise ValueError(
            f"--augment flips and crops images (C, H, W), and the store holds samples of shape "
            f"{store.sample_shape}; pass --augment none (a preset or config may have set it)"
        )
    spec = ModelSpec(
        name=config.model,
        sample_shape=store.sample_shape,
        num_classes=store.num_classes,
        dtype=config.dtype,
        l2=store.l2 if config.l2 is None else config.l2,
        builder=_builder_bytes(config.model, builder),
        train_batch=config.batch_size,
        augment=config.augment,
        precision=config.precision,
    )
    # The run's strategy, built once; the unset settings it and the model filled are written
    # into the config (and so config.toml): a run from config.toml builds an equal one.
    # With --overhead-share, K (which DANE's unset mu reads) is chosen once the cluster is up,
    # and they are written then (measured_steps.with_local_steps).
    strategy = strategy_on_store(config, store)
    if config.overhead_share is None:
        config = with_strategy_resolved(config, strategy, spec.l2)
    weights, buffers = initial_model(
        spec,
        _first_rows(config, store),
        store.task,
        seed=config.seed,
        algorithm=config.algorithm,
        full_batch=getattr(strategy, "full_batch", False),
        exact_solver=None if config.local_solver == "steps" else config.local_solver,
    )
    return RunSetup(
        config=config, store=store, spec=spec, strategy=strategy, weights=weights, buffers=buffers
    )


def _builder_bytes(name: str, builder: Callable[..., nn.Module] | None) -> bytes:
    if builder is not None:
        return to_bytes(builder)
    return user_spec_builder(name) if is_import_path(name) else b""


def _first_rows(config: RunConfig, store: StoreInfo) -> torch.Tensor:
    """A few training rows as a worker holds them (normalised, in the run's dtype), on the CPU."""
    args = shard_load_args(config, store, 0)
    args.update(stop=min(args["start"] + CHECK_ROWS, args["stop"]), device="cpu")
    return load_shard(**args).x.dense()


def _check_dtype_holds(store: StoreInfo, dtype: str) -> None:
    """ValueError if training in `dtype` would round the store's features or targets."""
    arrays = [("features", store.x_dtype)]
    if store.task == "regression":
        arrays.append(("targets", store.y_dtype))
    for what, stored in arrays:
        if not np.can_cast(np.dtype(stored), np.dtype(dtype), casting="safe"):
            raise ValueError(
                f"the store holds {stored} {what}, which --dtype {dtype} cannot hold without "
                f"rounding; pass --dtype {stored}"
            )


def initial_weights(spec: ModelSpec, seed: int) -> torch.Tensor:
    """The model's default initialisation under `seed`, as a flat vector."""
    return initial_state(spec, seed)[0]


def initial_state(spec: ModelSpec, seed: int) -> tuple[torch.Tensor, Buffers]:
    """The model's default initialisation under `seed`: flat weights and its buffers."""
    torch.manual_seed(seed)
    return model_state(build_model(spec))


# auto's bound on the model's bytes (weights and buffers) for the torch form. Measured on
# the 2-core development machine, loopback, 2 workers, idle (`dane bench
# collective-crossover`, docs/results/scaling/two-forms.md "Two forms of a round", 2026-12-07): the
# group's exchange of a phase's sums beats a dependent Dask hop passing the same bytes up to
# 4 MiB (6.8 against 8.1 ms), ties it at 8 and 16 MiB and loses at 44.5 MiB (47.7 against
# 19.6 ms: a Dask transfer moves about 2 GB/s here, gloo's all-reduce about 1.2).
TORCH_MAX_BYTES = 4 * 2**20


def choose_collective(config: RunConfig, model_bytes: int) -> tuple[str, str]:
    """The collective a run's rounds use, and why (config.toml's note, the run's first line):
    auto is torch for a model of at most TORCH_MAX_BYTES, where its round costs a fraction of
    a Dask hop, else dask, whose transfers move large sums faster on this machine."""
    if config.collective != "auto":
        return config.collective, f"{config.collective} (as set)"
    size = f"{model_bytes / 2**20:.2f} MiB of weights"
    if model_bytes <= TORCH_MAX_BYTES:
        return "torch", f"torch (auto: {size}, a gloo group's exchange under a Dask hop)"
    return "dask", f"dask (auto: {size}, above 4 MiB Dask's transfers move them faster)"
