"""--local-optimizer-state keep on a cluster: each shard's optimizer state stays with the run,
so both collectives equal the single-process reference bit for bit, and a resumed run equals the
uninterrupted one (the state is checkpointed beside the weights)."""

from __future__ import annotations

import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.loop import train
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run

pytestmark = pytest.mark.cluster

KEPT = {"local_steps": 4, "local_lr": 0.1, "batch_size": 32, "local_optimizer_state": "keep"}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """digits-tabular in 4 shards (float64 features), 2 on each of the 2 workers."""
    raw = load_source("digits-tabular", SourceOptions(seed=0))
    path = tmp_path_factory.mktemp("kept") / "digits.zarr"
    return write_store(raw, PartitionSpec(num_shards=4, seed=0), path, force=False).path


def _config(store, out, algorithm: str, **overrides) -> RunConfig:
    settings = dict(
        store=str(store), out=str(out), model="logistic", dtype="float64", l2=1e-3,
        algorithm=algorithm, rounds=3, seed=4, **KEPT,
    )  # fmt: skip
    return RunConfig(**{**settings, **overrides}).validate()


@pytest.mark.parametrize("collective", ["dask", "torch"])
@pytest.mark.parametrize("algorithm", ["dane", "fedavg"])
def test_kept_state_runs_equal_the_reference(
    algorithm, collective, table, cluster_client, tmp_path
):
    config = _config(table, tmp_path / "run", algorithm, collective=collective)

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)
    reset_setup = prepare_run(
        _config(table, tmp_path / "r", algorithm, local_optimizer_state="reset")
    )
    reset = run_reference(reset_setup, rounds=config.rounds, num_workers=2)

    checkpoint = load_checkpoint(RunDir(tmp_path / "run").latest)
    assert torch.equal(checkpoint["weights"], reference.weights)
    assert not torch.equal(reference.weights, reset.weights)  # keeping changed the run
    states = checkpoint["shard_states"]
    assert [s["steps"] for s in states] == [3 * KEPT["local_steps"]] * 4
    for kept, expected in zip(states, reference.shard_states, strict=True):
        assert torch.equal(kept["momentum"], expected.momentum)


def test_a_resumed_run_keeps_the_state_it_checkpointed(table, cluster_client, tmp_path):
    whole = _config(table, tmp_path / "whole", "dane", rounds=4)
    first = _config(table, tmp_path / "split", "dane", rounds=2)
    rest = _config(table, tmp_path / "split", "dane", rounds=4)

    train(whole, client=cluster_client)
    train(first, client=cluster_client)
    train(rest, client=cluster_client, resume=True)

    uninterrupted = load_checkpoint(RunDir(tmp_path / "whole").latest)
    resumed = load_checkpoint(RunDir(tmp_path / "split").latest)
    assert resumed["round"] == 4
    assert torch.equal(resumed["weights"], uninterrupted["weights"])
    for a, b in zip(resumed["shard_states"], uninterrupted["shard_states"], strict=True):
        assert torch.equal(a["momentum"], b["momentum"]) and a["steps"] == b["steps"] == 16
