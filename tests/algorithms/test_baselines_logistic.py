"""The paper's baselines (one-shot, ADMM, FedProx, GD, AGD) and DANE through Dask: a run on
multinomial logistic regression equals the reference runner's, weights, losses and the
validation split's scores. Their math on a small quadratic:
tests/algorithms/test_baselines_quadratic.py."""

from __future__ import annotations

import json

import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train


@pytest.fixture(scope="module")
def digits_table(tmp_path_factory):
    raw = load_source("digits-tabular", SourceOptions(seed=0))
    path = tmp_path_factory.mktemp("table") / "digits.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)


SETTINGS = {
    "one-shot": {},
    "admm": {"rho": 0.1},
    "fedprox": {"mu": 0.1},
    "gd": {"local_lr": 1.0},
    "agd": {"local_lr": 1.0, "momentum": 0.5},
    "dane": {"mu": 0.05},
}


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", list(SETTINGS))
def test_dask_run_equals_reference_on_logistic_regression(
    algorithm, digits_table, cluster_client, tmp_path
):
    # Multinomial logistic regression (not a quadratic), float64, 3 shards on 2 workers.
    config = RunConfig(
        store=digits_table.path,
        out=str(tmp_path / "run"),
        model="logistic",
        dtype="float64",
        l2=1e-3,
        algorithm=algorithm,
        local_solver="cg",
        local_tol=1e-8,
        rounds=3,
        seed=4,
        **SETTINGS[algorithm],
    ).validate()

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    start = initial_weights(prepare_run(config).spec, config.seed)
    assert weights.dtype == torch.float64
    assert (weights - start).abs().max() > 1e-2  # training moved the weights
    assert (weights - reference.weights).abs().max() < 1e-10
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    phases = 2 if algorithm == "dane" else 1
    assert [r["comm_rounds"] for r in rows] == [phases, 2 * phases, 3 * phases]
    for row, expected in zip(rows, reference.history, strict=True):
        assert row["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-12)
        # The default validation split: held out alike, scored alike, the same round selected.
        assert row["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-12)
        assert (row["val_accuracy"], row["is_best"]) == (
            expected["val_accuracy"],
            expected["is_best"],
        )
        assert row["val_accuracy"] is not None
