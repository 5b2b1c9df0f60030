"""A run's training set read in one process, exactly as the workers read it: for the
single-process baselines and for the problems the benchmarks solve directly."""

from __future__ import annotations

import torch

from ...datasets.rows.features import StoredRows
from ...pipeline.engine.plan import RunSetup
from ...pipeline.engine.round.objective import ShardObjective
from ...pipeline.engine.round.shards import ShardData, make_objective


def load_rows(setup: RunSetup, shards: list[int], index: int = 0) -> ShardData:
    """The given training shards concatenated in order, as one ShardData."""
    loaded = [setup.load_train(i) for i in shards]
    x, y = StoredRows.concat([s.x for s in loaded]), torch.cat([s.y for s in loaded])
    return ShardData(index=index, x=x, y=y, task=setup.store.task)


def full_objective(setup: RunSetup) -> ShardObjective:
    """f of the whole training set (every shard's rows in order), as one ShardObjective."""
    return make_objective(setup.spec, load_rows(setup, list(range(setup.store.num_shards))))


def shard_objectives(setup: RunSetup) -> list[ShardObjective]:
    """f_i of every training shard, in shard order."""
    shards = range(setup.store.num_shards)
    return [make_objective(setup.spec, setup.load_train(i)) for i in shards]
