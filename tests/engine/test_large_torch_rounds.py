"""`--collective torch` above the size where the exchange turns to a reduce-scatter
(pipeline/engine/round/exchange.py): a 1.3 MB model's rounds equal the single-process
reference bit for bit, on 2 workers and on 3 workers over 8 shards (a worker holding two
subtrees, chunks of uneven length), for a one-phase, a two-phase and a shard-state
algorithm, and with the lossy transport, which sends the sums as they are."""

from __future__ import annotations

import logging

import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.exchange import GATHER_MAX_BYTES
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster

WIDE = """
from torch import nn


def wide(num_classes, sample_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(sample_shape[-1], 2100), nn.ReLU(),
                         nn.Linear(2100, num_classes))
"""
SETTINGS = {
    "dane": {"mu": 0.05, "local_steps": 2, "local_lr": 0.05},
    "fedavg": {"local_steps": 2, "local_lr": 0.05},
    "scaffold": {"local_steps": 2, "local_lr": 0.05},
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    raw = load_source("digits-tabular", SourceOptions(seed=0))
    root = tmp_path_factory.mktemp("wide")
    (root / "wide.py").write_text(WIDE)
    made = {
        m: write_store(
            raw, PartitionSpec(num_shards=m, seed=0), root / f"d{m}.zarr", force=False
        ).path
        for m in (4, 8)
    }
    return root / "wide.py", made


@pytest.fixture(scope="module")
def three_workers():
    import dask
    from distributed import Client, LocalCluster

    from dask_dane.pipeline.launchers.cluster import CLUSTER_CONFIG, TorchThreads

    with dask.config.set(CLUSTER_CONFIG):
        cluster = LocalCluster(
            n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
        )  # fmt: skip
    client = Client(cluster)
    client.register_plugin(TorchThreads())
    yield client
    client.close()
    cluster.close()


def _equals_reference(stores, tmp_path, client, workers, shards, algorithm, **extra) -> None:
    model, made = stores
    config = RunConfig(
        store=str(made[shards]), out=str(tmp_path / "run"), model=f"{model}:wide",
        dtype="float64", algorithm=algorithm, rounds=3, seed=5, collective="torch",
        batch_size=16, **SETTINGS[algorithm], **extra,
    ).validate()  # fmt: skip
    setup = prepare_run(config)
    weights = initial_weights(setup.spec, config.seed)
    assert weights.numel() * weights.element_size() > max(2**20, GATHER_MAX_BYTES)

    train(config, client=client)
    reference = run_reference(setup, rounds=config.rounds, num_workers=workers)

    saved = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(saved, reference.weights)


@pytest.mark.parametrize("algorithm", list(SETTINGS))
def test_a_large_models_rounds_equal_the_reference_on_two_workers(
    algorithm, stores, cluster_client, tmp_path
):
    _equals_reference(stores, tmp_path, cluster_client, 2, 4, algorithm)


def test_the_lossy_transport_at_a_large_size_equals_the_reference(stores, cluster_client, tmp_path):
    _equals_reference(stores, tmp_path, cluster_client, 2, 4, "dane", transport="bfloat16")


@pytest.mark.parametrize("algorithm", ["dane", "scaffold"])
def test_three_workers_over_eight_shards_equal_the_reference(
    algorithm, stores, three_workers, tmp_path
):
    _equals_reference(stores, tmp_path, three_workers, 3, 8, algorithm)
