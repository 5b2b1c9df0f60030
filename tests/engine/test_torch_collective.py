"""`--collective torch`: rounds chained inside one task per worker, the sums all-gathered by a
gloo group over the Dask workers, equal to the single-process reference bit for bit for every
algorithm and transport, on 1, 2 and 4 workers; and the same rows as the Dask graph's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from run_configs import LOGISTIC, run_config

from dask_dane.pipeline.algorithms import ALGORITHMS
from dask_dane.pipeline.algorithms.parts.hyperparameters import setting_names
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster

# Every registered algorithm trains multinomial logistic regression here: a few local steps
# (those of these settings that it declares), unless EXCEPTIONS sets it apart.
LOCAL_STEPS = {"local_steps": 4, "local_lr": 0.1, "batch_size": 32}
EXACT = {"local_solver": "cg", "local_tol": 1e-8}
# The algorithms that solve their local problem to the end (the exact solvers: no local
# steps), and the step sizes and strengths the others need on this problem.
EXCEPTIONS = {
    "dane": {"mu": 0.05, **EXACT},
    "sdane": {"mu": 0.05},
    "sdane-adaptive": {"mu": 0.05},
    "sgd": {"local_lr": 0.5},
    "fedprox": {"mu": 0.1, **EXACT},
    "feddyn": {"mu": 0.01},
    "one-shot": EXACT,
    "admm": {"rho": 0.1, **EXACT},
    "gd": {"local_lr": 1.0},
    "agd": {"local_lr": 1.0, "momentum": 0.5},
}
TORCH = {**LOGISTIC, "collective": "torch"}  # every run here, rounds chained under torch


def _settings(algorithm: str) -> dict:
    """The algorithm and its settings here: its exceptions, after the local steps it declares
    where it takes local steps (no exact solver)."""
    exception = {"algorithm": algorithm, **EXCEPTIONS.get(algorithm, {})}
    if "local_solver" in exception:
        return exception
    declared = setting_names(ALGORITHMS[algorithm])
    return {**{k: v for k, v in LOCAL_STEPS.items() if k in declared}, **exception}


@pytest.fixture(scope="module")
def clusters():
    """LocalClusters of 1 and 4 workers (the session's shared one has 2), started on demand."""
    import dask
    from distributed import Client, LocalCluster

    from dask_dane.pipeline.launchers.cluster import CLUSTER_CONFIG, TorchThreads

    started: dict[int, Client] = {}

    def of(workers: int) -> Client:
        if workers not in started:
            with dask.config.set(CLUSTER_CONFIG):
                cluster = LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True,
                    host="127.0.0.1", dashboard_address="127.0.0.1:0",
                    silence_logs=logging.ERROR,
                )  # fmt: skip
            started[workers] = Client(cluster)
            started[workers].register_plugin(TorchThreads())
        return started[workers]

    yield of
    for client in started.values():
        cluster = client.cluster
        client.close()
        cluster.close()


def _rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").open()]


def _equals_reference(config: RunConfig, client, workers: int) -> None:
    summary = train(config, client=client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=workers)

    out = RunDir(Path(config.out)).root
    assert summary["rounds"] == config.rounds
    assert torch.equal(load_checkpoint(RunDir(out).latest)["weights"], reference.weights)
    rows = _rows(out)
    assert {r["round_form"] for r in rows} == {"torch"}
    for key in ("train_loss", "comm_bytes", "val_loss", "val_accuracy", "is_best"):
        assert [r[key] for r in rows] == [r[key] for r in reference.history], key
    assert [r["attempts"] for r in rows] == [1] * config.rounds


def test_the_exceptions_are_of_registered_algorithms():
    assert set(EXCEPTIONS) <= set(ALGORITHMS)


@pytest.mark.parametrize("transport", ["float32", "bfloat16"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_every_algorithm_equals_the_reference_on_two_workers(
    algorithm, transport, table, cluster_client, tmp_path
):
    config = run_config(
        table, TORCH, _settings(algorithm), transport=transport, out=tmp_path / "run"
    )
    _equals_reference(config, cluster_client, workers=2)


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("transport", ["float32", "bfloat16"])
@pytest.mark.parametrize("algorithm", ["dane", "scaffold"])  # two phases; shard states
def test_one_and_four_workers_equal_the_reference(
    algorithm, transport, workers, table, clusters, tmp_path
):
    config = run_config(
        table, TORCH, _settings(algorithm), transport=transport, out=tmp_path / "run"
    )
    _equals_reference(config, clusters(workers), workers=workers)


def test_a_network_run_gives_the_dask_graphs_weights_and_rows(
    digits_stores, cluster_client, tmp_path
):
    # The CNN on images, every few rounds checkpointed and evaluated: the same weights and
    # figures as the Dask graph's rounds; the checkpoint and evaluation cadences kept.
    common = dict(
        store=str(digits_stores[4]), model="small-cnn", algorithm="dane", mu=0.1, rounds=5,
        local_steps=5, local_lr=0.05, batch_size=16, seed=3, eval_every=2, checkpoint_every=2,
    )  # fmt: skip
    runs = {}
    for collective in ("dask", "torch"):
        out = tmp_path / collective
        config = RunConfig(**common, out=str(out), collective=collective).validate()
        train(config, client=cluster_client)
        runs[collective] = (load_checkpoint(RunDir(out).latest), _rows(out))

    (dask_saved, dask_rows), (torch_saved, torch_rows) = runs["dask"], runs["torch"]
    assert torch.equal(torch_saved["weights"], dask_saved["weights"])
    assert torch_saved["round"] == 5
    keys = ("round", "train_loss", "test_accuracy", "val_accuracy", "comm_bytes", "is_best")
    for ours, theirs in zip(torch_rows, dask_rows, strict=True):
        assert {k: ours[k] for k in keys} == {k: theirs[k] for k in keys}
    assert [r["test_accuracy"] is not None for r in torch_rows] == [False, True, False, True, True]


def test_the_run_stops_at_its_target_in_the_round_that_reaches_it(
    digits_stores, cluster_client, tmp_path
):
    # --stop-at-accuracy: every rank reads the same scores and ends the segment at that round,
    # whose weights the driver saves; no round after it is run or recorded.
    config = RunConfig(
        store=str(digits_stores[2]), out=str(tmp_path / "run"), model="small-cnn", rounds=20,
        local_steps=10, seed=2, stop_at_accuracy=0.5, collective="torch",
    ).validate()  # fmt: skip

    summary = train(config, client=cluster_client)

    rows = _rows(tmp_path / "run")
    reached = [r["val_accuracy"] >= 0.5 for r in rows]
    assert reached[-1] and not any(reached[:-1])
    assert summary["rounds"] == len(rows) < 20
    assert load_checkpoint(RunDir(tmp_path / "run").latest)["round"] == len(rows)
