"""BatchNorm on odd shards at --batch-size 2: no full-pass batch of a batch-dependent model
falls to one row (BatchNorm1d refuses it in training), and every other pass keeps its batches.

The store: 40 rows of 3 classes, Dirichlet(0.5) over 2 shards with seed 24, which gives shards
of 33 and 7 rows, both odd (ceil(7 / 2) = 4 near-equal batches would be 2, 2, 1, 2 rows).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from run_configs import run_config
from torch import nn
from torch.nn import functional as F

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.raw import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.models.registry import build_model
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.objective import full_pass_batches
from dask_dane.pipeline.engine.round.shards import load_shard, make_objective
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.run_setup import initial_state, prepare_run
from dask_dane.pipeline.training import train

FEATURES = 5
MODEL_FILE = """
from torch import nn


def bn1d(sample_shape, num_classes):
    return nn.Sequential(
        nn.Linear(sample_shape[0], 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, num_classes)
    )
"""


def _old_batches(rows: int, batch: int) -> int:
    """The full pass's batch count before the fix: ceil(rows / batch)."""
    return -(-rows // batch)


def _sizes(rows: int, count: int) -> list[int]:
    bounds = np.linspace(0, rows, count + 1).round().astype(int).tolist()
    return [b - a for a, b in itertools.pairwise(bounds)]


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    raw = RawDataset(
        source="test-bn",
        task="classification",
        num_classes=3,
        x_train=rng.normal(size=(40, FEATURES)).astype(np.float32),
        y_train=np.arange(40, dtype=np.int64) % 3,
        x_test=rng.normal(size=(9, FEATURES)).astype(np.float32),
        y_test=np.arange(9, dtype=np.int64) % 3,
    )
    partition = PartitionSpec(kind="dirichlet", num_shards=2, seed=24, alpha=0.5)
    path = tmp_path_factory.mktemp("bn") / "odd.zarr"
    info = write_store(raw, partition, path, force=False)
    assert [b - a for a, b in info.shards] == [33, 7]
    return info.path


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("bn-model") / "bn_models.py"
    path.write_text(MODEL_FILE)
    return f"{path}:bn1d"


# No validation split: it would take the shards to 30 and 6 rows, even, not the odd ones.
SETTINGS = dict(
    algorithm="dane", eta=1.0, mu=0.1, local_steps=3, local_lr=0.05, batch_size=2, momentum=0.0,
    rounds=2, seed=5, val_fraction=0.0,
)  # fmt: skip


def test_no_batch_count_leaves_a_single_row_and_working_ones_are_unchanged():
    for rows, batch in itertools.product(range(2, 80), range(2, 12)):
        old = _old_batches(rows, batch)
        sizes = _sizes(rows, full_pass_batches(rows, batch))
        assert min(sizes) >= 2, (rows, batch, sizes)
        assert max(sizes) <= 2 * batch - 1, (rows, batch, sizes)  # still about a batch each
        if min(_sizes(rows, old)) >= 2:  # a pass that ran before keeps its exact batches
            assert full_pass_batches(rows, batch) == old, (rows, batch)
    assert _sizes(7, full_pass_batches(7, 2)) == [2, 3, 2]  # not 2, 2, 1, 2


def test_full_pass_on_the_7_row_shard_is_torchs_own_train_mode_loss_over_2_3_2(
    odd_store, model_path
):
    setup = prepare_run(run_config(odd_store, SETTINGS, model=model_path))
    shard = load_shard(**setup.shard_args(1))
    weights, buffers = initial_state(setup.spec, 0)
    objective = make_objective(setup.spec, shard, buffers)

    loss, grad = objective.loss_and_grad(weights)

    torch.manual_seed(0)
    model = build_model(setup.spec).train()
    spans = [(0, 2), (2, 5), (5, 7)]
    total = sum(
        F.cross_entropy(model(shard.x[a:b]), shard.y[a:b], reduction="sum") for a, b in spans
    )
    (total / 7).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert len(shard.x) == 7
    assert loss == pytest.approx(float(total.detach() / 7), rel=1e-6)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)
    assert isinstance(model[1], nn.BatchNorm1d)


def test_dane_trains_a_batchnorm1d_model_at_batch_size_2_on_odd_dirichlet_shards(
    odd_store, model_path
):
    setup = prepare_run(run_config(odd_store, SETTINGS, model=model_path))
    start, _ = initial_state(setup.spec, setup.config.seed)

    run = run_reference(setup, rounds=2, num_workers=2)

    assert [row["round"] for row in run.history] == [1, 2]
    assert all(np.isfinite(row["train_loss"]) for row in run.history)
    assert (run.weights - start).abs().max() > 1e-3  # the rounds moved the weights
    assert run.buffers["1.num_batches_tracked"].item() == 6  # 2 rounds of 3 steps


@pytest.mark.cluster
def test_dask_run_equals_reference_on_the_odd_shards(
    odd_store, model_path, cluster_client, tmp_path
):
    config = run_config(odd_store, SETTINGS, model=model_path, out=tmp_path / "run")

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert (weights - reference.weights).abs().max() < 1e-5
