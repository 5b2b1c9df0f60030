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
from dataclasses import dataclass, field
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
from ..engine.protocol import Strategy
from ..engine.round.augment import parse_augment
from ..engine.round.shards import ShardData, load_evaluation, load_shard
from .config import RunConfig
from .epochs import strategy_on_store, with_epochs_resolved, with_strategy_resolved
from .model_check import CHECK_ROWS, initial_model


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    config: RunConfig
    store: StoreInfo
    spec: ModelSpec
    strategy: Strategy
    # The model as built once on the driver under config.seed (model_check.initial_model):
    # round 0's flat weights and buffers, and what a resumed checkpoint must fit.
    weights: torch.Tensor = field(repr=False, compare=False)
    buffers: Buffers = field(repr=False, compare=False)
    # How a worker holds its part of the test split and of the held-out validation rows
    # (resident | stream), resolved beside the shards' (run/shard_memory.py); None: as the
    # shards are held.
    test_memory: str | None = None
    val_memory: str | None = None

    def shard_args(self, index: int) -> dict:
        """Keyword arguments of shards.load_shard for training shard `index`."""
        return _shard_args(self.config, self.store, index)

    def val_args(self, index: int) -> dict:
        """Keyword arguments of shards.load_shard for training shard `index`'s held-out rows."""
        args = {**self.shard_args(index), "part": "val"}
        return {**args, "shard_memory": self.val_memory or args["shard_memory"]}

    def test_args(self) -> dict:
        stop = self.store.num_test
        args = _load_args(self.config, self.store, split="test", start=0, stop=stop, index=-1)
        return {**args, "shard_memory": self.test_memory or args["shard_memory"]}

    # In-process loading, exactly as the workers load: the reference, evaluation and the
    # benchmarks' single-process baselines read the same normalised rows through these.
    def load_train(self, index: int) -> ShardData:
        """Training shard `index`."""
        return load_shard(**self.shard_args(index))

    def load_test(self) -> ShardData:
        return load_shard(**self.test_args())

    def piece_args(self, index: int) -> dict:
        """Keyword arguments of shards.load_evaluation for scoring piece `index` (one per
        training shard, scored on its worker: round/scoring.py): a near-equal slice of the
        test split, carrying that shard's held-out validation rows."""
        pieces, rows = self.store.num_shards, self.store.num_test
        start, stop = (round(k * rows / pieces) for k in (index, index + 1))
        test = {**self.test_args(), "start": start, "stop": stop}
        val = [self.val_args(index)] if self.config.val_fraction > 0 else []
        return dict(test=test, val=val)

    def load_pieces(self) -> list[ShardData]:
        """Every scoring piece (piece_args), in order, read in this process."""
        return [load_evaluation(**self.piece_args(i)) for i in range(self.store.num_shards)]

    def load_evaluation(self) -> ShardData:
        """The test split carrying every shard's held-out rows (in shard order) as held_out."""
        held = range(self.store.num_shards) if self.config.val_fraction > 0 else ()
        return load_evaluation(test=self.test_args(), val=[self.val_args(i) for i in held])


def _load_args(config: RunConfig, store: StoreInfo, **where: object) -> dict:
    """Keyword arguments of shards.load_shard for rows of `store` (`where`: which)."""
    return dict(
        store=store.path,
        task=store.task,
        num_classes=store.num_classes,
        normalization=store.normalization,
        dtype=config.dtype,
        device=config.device,
        # auto is resolved by the driver from the workers' memory (run/shard_memory.py);
        # in one process, with no worker's limit to compare with, shards are resident.
        shard_memory={"auto": "resident"}.get(config.shard_memory, config.shard_memory),
        **where,
    )


def _shard_args(config: RunConfig, store: StoreInfo, index: int) -> dict:
    """Keyword arguments of shards.load_shard for training shard `index` (its held-out rows
    dropped: round/shards.py)."""
    start, stop = store.shards[index]
    args = _load_args(config, store, split="train", start=start, stop=stop, index=index)
    return {**args, "part": "train", "val_fraction": config.val_fraction, "seed": config.seed}


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
        write_store(raw, spec, path, force=replace)
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
            f"{store.sample_shape}; drop --augment"
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
    # The unset settings the strategy and the model filled, written into the config (and so
    # config.toml), and the strategy built from it: a run from config.toml builds this one.
    # With --overhead-share, K (which DANE's unset mu reads) is chosen once the cluster is up,
    # and they are written then (measured_steps.with_local_steps).
    if config.overhead_share is None:
        config = with_strategy_resolved(config, strategy_on_store(config, store), spec.l2)
    strategy = strategy_on_store(config, store)
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
    args = _shard_args(config, store, 0)
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
# collective-crossover`, docs/results/scaling.md "Two forms of a round", 2026-12-07): the
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
