"""--local-optimizer-state keep on a cluster: each shard's optimizer state stays with the run,
so both collectives equal the single-process reference bit for bit, and a resumed run equals the
uninterrupted one (the state is checkpointed beside the weights)."""

from __future__ import annotations

import pytest
import torch
from run_configs import LOGISTIC, run_config

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster

KEPT = {"local_steps": 4, "local_lr": 0.1, "batch_size": 32, "local_optimizer_state": "keep"}


@pytest.mark.parametrize("collective", ["dask", "torch"])
@pytest.mark.parametrize("algorithm", ["dane", "fedavg"])
def test_kept_state_runs_equal_the_reference(
    algorithm, collective, table, cluster_client, tmp_path
):
    settings = {**LOGISTIC, **KEPT, "algorithm": algorithm}
    config = run_config(table, settings, collective=collective, out=tmp_path / "run")

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)
    reset_setup = prepare_run(
        run_config(table, settings, local_optimizer_state="reset", out=tmp_path / "r")
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
    dane = {**LOGISTIC, **KEPT, "algorithm": "dane"}
    whole = run_config(table, dane, rounds=4, out=tmp_path / "whole")
    first = run_config(table, dane, rounds=2, out=tmp_path / "split")
    rest = run_config(table, dane, rounds=4, out=tmp_path / "split")

    train(whole, client=cluster_client)
    train(first, client=cluster_client)
    train(rest, client=cluster_client, resume=True)

    uninterrupted = load_checkpoint(RunDir(tmp_path / "whole").latest)
    resumed = load_checkpoint(RunDir(tmp_path / "split").latest)
    assert resumed["round"] == 4
    assert torch.equal(resumed["weights"], uninterrupted["weights"])
    for a, b in zip(resumed["shard_states"], uninterrupted["shard_states"], strict=True):
        assert torch.equal(a["momentum"], b["momentum"]) and a["steps"] == b["steps"] == 16
