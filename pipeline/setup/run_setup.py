"""What a run is made of, resolved and checked once: store, model, strategy, shard layout.

Shared by the Dask driver (loop.py) and the single-process reference (reference.py), so both
start from identical weights and read identical shards.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...datasets.partition import PartitionSpec
from ...datasets.sources import SourceOptions, load_source
from ...datasets.store import StoreInfo, open_store, write_store
from ...models.flat import Buffers, flatten_parameters, model_buffers
from ...models.registry import (
    ModelSpec,
    build_model,
    check_model_fits,
    check_model_task,
    is_convex,
    user_spec_builder,
)
from ...models.user import is_import_path, to_bytes
from ..algorithms import Strategy
from ..round.augment import parse_augment
from ..round.features import StoredRows
from ..round.shards import ShardData, load_evaluation, load_shard, make_objective
from .config import RunConfig
from .epochs import strategy_on_store, with_epochs_resolved
from .model_check import CHECK_ROWS, check_model_runs


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    config: RunConfig
    store: StoreInfo
    spec: ModelSpec
    strategy: Strategy
    # How a worker holds its part of the test split and of the held-out validation rows
    # (resident | stream), resolved beside the shards' (run/shard_memory.py); None: as the
    # shards are held.
    test_memory: str | None = None
    val_memory: str | None = None

    def shard_args(self, index: int) -> dict:
        """Keyword arguments of tasks.load_shard for training shard `index`."""
        start, stop = self.store.shards[index]
        args = self._load_args(split="train", start=start, stop=stop, index=index)
        return {**args, **self._holdout("train")}

    def val_args(self, index: int) -> dict:
        """Keyword arguments of tasks.load_shard for training shard `index`'s held-out rows."""
        args = {**self.shard_args(index), **self._holdout("val")}
        return {**args, "shard_memory": self.val_memory or args["shard_memory"]}

    def _holdout(self, part: str) -> dict:
        return dict(part=part, val_fraction=self.config.val_fraction, seed=self.config.seed)

    def test_args(self) -> dict:
        args = self._load_args(split="test", start=0, stop=self.store.num_test, index=-1)
        return {**args, "shard_memory": self.test_memory or args["shard_memory"]}

    # In-process loading, exactly as the workers load: the reference, evaluation and the
    # benchmarks' single-process baselines read the same normalised rows through these.
    def load_train(self, index: int) -> ShardData:
        """Training shard `index`."""
        return load_shard(**self.shard_args(index))

    def load_test(self) -> ShardData:
        return load_shard(**self.test_args())

    def evaluation_args(self) -> dict:
        """Keyword arguments of tasks.load_evaluation: the test split and the held-out rows."""
        held = range(self.store.num_shards) if self.config.val_fraction > 0 else ()
        return dict(test=self.test_args(), val=[self.val_args(i) for i in held])

    def piece_args(self, index: int) -> dict:
        """Keyword arguments of tasks.load_evaluation for scoring piece `index` (one per
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
        return load_evaluation(**self.evaluation_args())

    def load_rows(self, shards: list[int], index: int = 0) -> ShardData:
        """The given training shards concatenated in order, as one ShardData."""
        loaded = [self.load_train(i) for i in shards]
        x, y = StoredRows.concat([s.x for s in loaded]), torch.cat([s.y for s in loaded])
        return ShardData(index=index, x=x, y=y, task=self.store.task)

    def full_objective(self) -> object:
        """f of the whole training set (every shard's rows in order), as one ShardObjective."""
        return make_objective(self.spec, self.load_rows(list(range(self.store.num_shards))))

    def objectives(self) -> list:
        """f_i of every training shard (objective.ShardObjective), in shard order."""
        return [make_objective(self.spec, self.load_train(i)) for i in range(self.store.num_shards)]

    def _load_args(self, **where: object) -> dict:
        return dict(
            store=self.store.path,
            task=self.store.task,
            num_classes=self.store.num_classes,
            normalization=self.store.normalization,
            dtype=self.config.dtype,
            device=self.config.device,
            # auto is resolved by the driver from the workers' memory (run/shard_memory.py);
            # in one process, with no worker's limit to compare with, shards are resident.
            shard_memory={"auto": "resident"}.get(
                self.config.shard_memory, self.config.shard_memory
            ),
            **where,
        )


def default_store_path(config: RunConfig) -> Path:
    """Where the embedded default (digits, one shard per worker) is cached."""
    root = Path(os.environ.get("DANE_CACHE", Path.home() / ".cache" / "dask-dane"))
    return root / f"digits-{config.workers}shards-seed{config.seed}.zarr"


def ensure_default_store(config: RunConfig) -> Path:
    """Prepare the embedded default store on first use; reuse it afterwards."""
    return prepare_store(
        "digits", default_store_path(config), shards=config.workers, seed=config.seed
    )


def prepare_store(
    source: str,
    path: str | Path,
    *,
    shards: int,
    seed: int = 0,
    options: SourceOptions | None = None,
    replace: bool = False,
    **partition: object,
) -> Path:
    """`dane prepare SOURCE --shards N --seed S` as a call: write the store unless it exists
    (or always, `replace`); `partition` holds PartitionSpec's fields (kind="iid" unless given)
    and `options` the source's (its seed is `seed` unless given)."""
    path = Path(path)
    if replace or not path.exists():
        raw = load_source(source, options or SourceOptions(seed=seed))
        spec = PartitionSpec(**{"kind": "iid", **partition}, num_shards=shards, seed=seed)
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
    check_model_fits(config.model, store.sample_shape)
    check_model_task(config.model, store.task)
    if config.local_solver != "steps" and not is_convex(config.model):
        raise ValueError(
            f"--local-solver {config.local_solver} solves the local problem exactly, which needs a "
            f"convex model, and {config.model!r} is not; use --model linear or logistic, or "
            "--local-solver steps"
        )
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
    strategy = strategy_on_store(config, store)
    setup = RunSetup(config=config, store=store, spec=spec, strategy=strategy)
    check_model_runs(
        spec,
        _first_rows(setup),
        store.task,
        algorithm=config.algorithm,
        full_batch=getattr(setup.strategy, "full_batch", False),
    )
    return setup


def _builder_bytes(name: str, builder: Callable[..., nn.Module] | None) -> bytes:
    if builder is not None:
        return to_bytes(builder)
    return user_spec_builder(name) if is_import_path(name) else b""


def _first_rows(setup: RunSetup) -> torch.Tensor:
    """A few training rows as a worker holds them (normalised, in the run's dtype), on the CPU."""
    args = setup.shard_args(0)
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
    model = build_model(spec)
    return flatten_parameters(model), model_buffers(model)
