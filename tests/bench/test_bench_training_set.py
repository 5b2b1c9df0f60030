"""bench/common/training_set.py: a run's training set read in one process, as the workers
read it (the single-process baselines and the convergence benchmark's direct solve)."""

from __future__ import annotations

import pytest
import torch

from dask_dane.bench.common.training_set import full_objective, load_rows, shard_objectives
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run

pytestmark = pytest.mark.bench


def _setup(store):
    config = RunConfig(store=str(store), workers=4, model="mlp", dtype="float64")
    return prepare_run(config.validate())


def test_load_rows_concatenates_the_named_shards_in_the_order_given(digits_stores):
    setup = _setup(digits_stores[4])
    shards = [setup.load_train(i) for i in (2, 0)]

    rows = load_rows(setup, [2, 0], index=7)

    assert rows.index == 7 and rows.task == setup.store.task
    assert torch.equal(rows.x.dense(), torch.cat([s.x.dense() for s in shards]))
    assert torch.equal(rows.y, torch.cat([s.y for s in shards]))


def test_the_full_objective_is_the_row_weighted_mean_of_the_shards(digits_stores):
    setup = _setup(digits_stores[4])
    weights = initial_weights(setup.spec, 0)

    shards = shard_objectives(setup)
    full = full_objective(setup)

    assert [o.num_samples for o in shards] == [setup.load_train(i).y.numel() for i in range(4)]
    assert full.num_samples == sum(o.num_samples for o in shards)
    mean = sum(o.num_samples * o.loss(weights) for o in shards) / full.num_samples
    assert abs(full.loss(weights) - mean) < 1e-10
