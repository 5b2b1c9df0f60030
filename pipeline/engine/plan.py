"""The run plan the engine receives: what a run is made of (RunSetup), and the settings the
engine reads of it (EngineSettings).

setup/run_setup.py's prepare_run plans a run: it opens the store, resolves the settings,
builds the strategy and the model once, and returns a RunSetup. The engine reads the plan
and never makes one, so it imports nothing of setup/: EngineSettings names the settings it
reads, which setup/config.py's RunConfig has among its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ...datasets.store import StoreInfo
from ...models.flat import Buffers
from ...models.registry import ModelSpec
from .protocol import Strategy
from .round.shards import ShardData, load_evaluation, load_shard


class EngineSettings(Protocol):
    """The settings the engine reads (setup/config.py's RunConfig holds them all, and more:
    docs/reference/config.md says what each means)."""

    model: str
    rounds: int
    seed: int
    dtype: str
    device: str
    batch_size: int
    shard_memory: str
    val_fraction: float
    transport: str
    threads_per_worker: int
    eval_every: int
    checkpoint_every: int
    patience: int
    stop_at_accuracy: float
    collective: str
    collective_timeout: float
    timeout: float
    scheduler: str | None
    overhead_share: float | None
    out: str

    def as_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    """A run as planned (setup/run_setup.py prepare_run builds it): its settings, store,
    model and strategy, and the model's weights as built once."""

    config: EngineSettings
    store: StoreInfo
    spec: ModelSpec
    strategy: Strategy
    # The model as built once on the driver under config.seed (model_check.initial_model):
    # round 0's flat weights and buffers, and what a resumed checkpoint must fit.
    weights: torch.Tensor = field(repr=False, compare=False)
    buffers: Buffers = field(repr=False, compare=False)
    # How a worker holds its part of the test split and of the held-out validation rows
    # (resident | stream), resolved beside the shards' (setup/shard_memory.py); None: as the
    # shards are held.
    test_memory: str | None = None
    val_memory: str | None = None

    def shard_args(self, index: int) -> dict:
        """Keyword arguments of shards.load_shard for training shard `index`."""
        return shard_load_args(self.config, self.store, index)

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


def _load_args(config: EngineSettings, store: StoreInfo, **where: object) -> dict:
    """Keyword arguments of shards.load_shard for rows of `store` (`where`: which)."""
    return dict(
        store=store.path,
        task=store.task,
        num_classes=store.num_classes,
        normalization=store.normalization,
        dtype=config.dtype,
        device=config.device,
        # auto is resolved by the driver from the workers' memory (setup/shard_memory.py);
        # in one process, with no worker's limit to compare with, shards are resident.
        shard_memory={"auto": "resident"}.get(config.shard_memory, config.shard_memory),
        **where,
    )


def shard_load_args(config: EngineSettings, store: StoreInfo, index: int) -> dict:
    """Keyword arguments of shards.load_shard for training shard `index` (its held-out rows
    dropped: round/shards.py)."""
    start, stop = store.shards[index]
    args = _load_args(config, store, split="train", start=start, stop=stop, index=index)
    return {**args, "part": "train", "val_fraction": config.val_fraction, "seed": config.seed}
