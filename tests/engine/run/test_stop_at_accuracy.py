"""`--stop-at-accuracy A`: a run ends at its first evaluation at or above A, and only there.

An undisturbed run of all rounds gives each round's test accuracy and weights; the target is
one it first reaches part way through. The run with the target must end at that round (its
metrics rows, its checkpoint and its summary), with the very weights the undisturbed run had
there; and with --eval-every 3, not at a round that has no evaluation, even where the weights
there would score above A, but at the next evaluation that does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.training import Callbacks, train

pytestmark = pytest.mark.cluster
ROUNDS = 12
# Gradient descent with a small step on logistic regression: test accuracy climbs slowly, a
# round at a time (measured 0.32, 0.33, 0.35, 0.35, 0.39, 0.43, 0.46, 0.50, ... 0.60). No
# validation split: the target is then read off the test accuracy, which these tests follow.
SETTINGS = dict(
    model="logistic", algorithm="gd", local_lr=0.05, dtype="float64", seed=1, val_fraction=0.0
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three classes, 4 features: 200 training rows in 2 shards, 100 test rows."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 4))
    scores = x @ rng.standard_normal((4, 3)) + 0.8 * rng.standard_normal((300, 3))
    y = scores.argmax(axis=1).astype(np.int64)
    raw = RawDataset(
        source="test-slow-climb",
        task="classification",
        num_classes=3,
        x_train=x[:200],
        y_train=y[:200],
        x_test=x[200:],
        y_test=y[200:],
    )
    path = tmp_path_factory.mktemp("stop") / "climb.zarr"
    return write_store(raw, PartitionSpec(num_shards=2, seed=0), path, force=False).path


@pytest.fixture(scope="module")
def undisturbed(cluster_client, store, tmp_path_factory):
    """All ROUNDS rounds, evaluated every round: (accuracy by round, weights by round)."""
    out = tmp_path_factory.mktemp("stop-ref") / "run"
    weights: dict[int, torch.Tensor] = {}
    config = RunConfig(store=str(store), out=str(out), rounds=ROUNDS, **SETTINGS).validate()
    train(
        config,
        client=cluster_client,
        callbacks=Callbacks(on_weights=lambda t, w: weights.setdefault(t, w.clone())),
    )
    accuracy = {row["round"]: row["test_accuracy"] for row in RunDir(out).rows()}
    assert sorted(accuracy) == list(range(1, ROUNDS + 1))
    return accuracy, weights


def _target(accuracy: dict[int, float]) -> tuple[float, int]:
    """Round 7's accuracy, and the first round that reaches it."""
    target = accuracy[7]
    first = min(t for t, a in accuracy.items() if a >= target)
    return target, first


def _assert_stopped_at(out, stop: int, target: float, undisturbed) -> list[dict]:
    accuracy, weights = undisturbed
    run = RunDir(out)
    rows = run.rows()
    assert [row["round"] for row in rows] == list(range(1, stop + 1))  # rows end there
    assert rows[-1]["test_accuracy"] == accuracy[stop] >= target
    assert all(r["test_accuracy"] is None or r["test_accuracy"] < target for r in rows[:-1])
    checkpoint = load_checkpoint(run.latest)
    assert checkpoint["round"] == stop
    assert torch.equal(checkpoint["weights"], weights[stop])  # stopped, not trained otherwise
    summary = json.loads(run.summary.read_text())
    assert summary["rounds"] == stop < ROUNDS
    assert summary["final_test_accuracy"] == accuracy[stop]
    assert summary["best_test_accuracy"] >= target
    return rows


def test_the_run_stops_at_its_first_evaluation_at_or_above_the_target(
    cluster_client, store, undisturbed, tmp_path, run_cli
):
    accuracy, _ = undisturbed
    target, first = _target(accuracy)
    assert 2 <= first < ROUNDS  # the premise: reached part way through, not at once
    out = tmp_path / "run"
    args = ["train", str(store), "--out", str(out), "--rounds", str(ROUNDS)]
    args += ["--model", "logistic", "--algorithm", "gd", "--local-lr", "0.05"]
    args += ["--dtype", "float64", "--seed", "1", "--val-fraction", "0"]
    args += ["--stop-at-accuracy", repr(target)]
    args += ["--scheduler", cluster_client.scheduler.address]

    status = run_cli(args)  # as a user types it

    assert status == 0
    _assert_stopped_at(out, first, target, undisturbed)


def test_a_round_without_an_evaluation_never_stops_the_run(
    cluster_client, store, undisturbed, tmp_path
):
    accuracy, _ = undisturbed
    target, first = _target(accuracy)
    evaluated = list(range(3, ROUNDS, 3))  # and the last round, which is past them
    stop = min(t for t in evaluated if accuracy[t] >= target)
    assert first % 3 and first < stop  # the premise: reached first between evaluations
    out = tmp_path / "run"
    config = RunConfig(
        store=str(store), out=str(out), rounds=ROUNDS, eval_every=3, stop_at_accuracy=target,
        **SETTINGS,
    ).validate()  # fmt: skip

    train(config, client=cluster_client)

    rows = _assert_stopped_at(out, stop, target, undisturbed)
    # Rounds from `first` on that have no evaluation carry no accuracy, so they could not stop
    # the run, though their weights score at or above the target.
    skipped = [t for t in range(first, stop) if t % 3]
    assert skipped and all(accuracy[t] >= target for t in skipped[:1])
    assert all(rows[t - 1]["test_accuracy"] is None for t in skipped)
