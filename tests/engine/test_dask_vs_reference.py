"""The Dask run equals the single-process reference, and counts its communication exactly."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from run_configs import run_config

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster

# float64 agrees to rounding of a few operations; float32 runs the same operations, so its
# bound is the 1e-5 (both are far below any real bug, which shows up at >= 1e-3).
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
# The CNN on digits for 3 rounds (unless a test says otherwise), each algorithm with its steps.
CNN = dict(model="small-cnn", rounds=3, seed=7)
SETTINGS = {
    "dane": dict(algorithm="dane", eta=1.0, mu=0.1, local_steps=5, local_lr=0.05, batch_size=16),
    "sgd": dict(algorithm="sgd", local_lr=0.1, batch_size=16),
    "fedavg": dict(algorithm="fedavg", local_steps=5, local_lr=0.05, batch_size=16),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shards", [2, 4])
@pytest.mark.parametrize("algorithm", ["dane", "sgd", "fedavg"])
def test_dask_run_equals_reference(
    algorithm, shards, dtype, digits_stores, cluster_client, tmp_path
):
    config = run_config(
        digits_stores[shards], CNN, SETTINGS[algorithm], dtype=dtype, out=tmp_path / "run"
    )

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert weights.dtype == getattr(torch, dtype)
    start = initial_weights(prepare_run(config).spec, config.seed)
    assert (weights - start).abs().max() > 1e-3  # training moved the weights
    assert (weights - reference.weights).abs().max() < TOLERANCE[dtype]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for row, expected in zip(rows, reference.history, strict=True):
        assert row["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-5)
        assert row["test_accuracy"] == pytest.approx(expected["test_accuracy"], abs=1e-9)
        # The default validation split: the same rows held out, scored, and selecting alike.
        assert row["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-5)
        assert row["val_accuracy"] == pytest.approx(expected["val_accuracy"], abs=1e-9)
        assert row["is_best"] == expected["is_best"] and row["val_accuracy"] is not None
        # The gradient noise scale: from the gradient phase (dane, sgd), none from fedavg
        # (noise_scale itself is None in a round whose |G|^2 estimate is not positive).
        assert (row["noise_trace"] is None) == (algorithm == "fedavg")
        for key in ("noise_trace", "noise_grad_sq", "noise_scale", "noise_scale_ema"):
            assert (row[key] is None) == (expected[key] is None)
            if row[key] is not None:
                assert row[key] == pytest.approx(expected[key], rel=1e-4)


@pytest.mark.parametrize(("algorithm", "phases"), [("dane", 2), ("sgd", 1), ("fedavg", 1)])
def test_comm_bytes_are_the_exact_count(algorithm, phases, digits_stores, cluster_client, tmp_path):
    # 4 shards on 2 workers, shards 0-1 on the first and 2-3 on the second. Each worker
    # sends its sum of its two shards to the other, in every phase (2 copies a phase); the
    # weights stay where the update made them.
    config = run_config(
        digits_stores[4], CNN, SETTINGS[algorithm], dtype="float32", rounds=2, out=tmp_path / "run"
    )
    num_params = initial_weights(prepare_run(config).spec, 0).numel()

    train(config, client=cluster_client)

    per_round = phases * 2 * num_params * 4
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["comm_bytes"] for r in rows] == [per_round, per_round]
    assert [r["cum_comm_bytes"] for r in rows] == [per_round, 2 * per_round]
    assert [r["comm_rounds"] for r in rows] == [phases, 2 * phases]
    assert all(r["max_worker_compute_s"] > 0 for r in rows)
    assert all(r["num_workers"] == 2 for r in rows)


def test_resume_gives_the_uninterrupted_weights(digits_stores, cluster_client, tmp_path):
    dane = {**CNN, **SETTINGS["dane"], "dtype": "float64"}
    whole = run_config(digits_stores[2], dane, rounds=4, out=tmp_path / "whole")
    first = run_config(digits_stores[2], dane, rounds=2, out=tmp_path / "split")
    rest = run_config(digits_stores[2], dane, rounds=4, out=tmp_path / "split")

    train(whole, client=cluster_client)
    train(first, client=cluster_client)
    train(rest, client=cluster_client, resume=True)

    uninterrupted = load_checkpoint(RunDir(tmp_path / "whole").latest)
    resumed = load_checkpoint(RunDir(tmp_path / "split").latest)
    assert resumed["round"] == 4
    assert torch.equal(resumed["weights"], uninterrupted["weights"])
    rows = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").open()]
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["cum_comm_bytes"] == 4 * rows[0]["comm_bytes"]


def test_a_second_run_into_the_same_directory_is_refused(digits_stores, cluster_client, tmp_path):
    config = run_config(
        digits_stores[2], CNN, SETTINGS["sgd"], dtype="float32", rounds=1, out=tmp_path / "run"
    )
    train(config, client=cluster_client)
    before = (tmp_path / "run" / "metrics.jsonl").read_bytes()

    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        train(config, client=cluster_client)

    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("algorithm", "shards"), [("dane", 4), ("fedavg", 4), ("sdane-adaptive", 4), ("scaffold", 4)]
)
def test_rounds_chained_on_the_cluster_equal_the_reference(
    algorithm, shards, digits_stores, cluster_client, tmp_path
):
    # One task per worker and phase, rounds chained on the cluster with two in flight;
    # every worker completes the pairwise tree from the workers' subtree sums (an
    # all-gather). The same arithmetic as the reference, to the last bit.
    settings = dict(local_steps=5, local_lr=0.05, batch_size=16, mu=0.1)
    config = run_config(
        digits_stores[shards], CNN, SETTINGS["fedavg"], settings, algorithm=algorithm,
        dtype="float64", out=tmp_path / "run",
    )  # fmt: skip
    summary = train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=3, num_workers=2)

    assert summary["rounds"] == 3
    checkpoint = load_checkpoint(RunDir(tmp_path / "run").latest)
    assert torch.equal(checkpoint["weights"], reference.weights)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in reference.history]
    assert [r["comm_bytes"] for r in rows] == [r["comm_bytes"] for r in reference.history]
    for key in ("val_loss", "val_accuracy", "is_best"):
        assert [r[key] for r in rows] == [r[key] for r in reference.history]
    assert [r["attempts"] for r in rows] == [1, 1, 1]


def test_a_workers_shards_run_in_threads_with_the_same_bits(
    digits_stores, cluster_client, tmp_path
):
    # --threads-per-worker 2: each worker's two shards run at once inside its one task a
    # phase, as two one-shard tasks did; each shard's work is seeded by its own index.
    config = replace(
        run_config(
            digits_stores[4], CNN, SETTINGS["dane"], dtype="float32", rounds=2, out=tmp_path / "run"
        ),
        threads_per_worker=2,
    )
    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, reference.weights)
