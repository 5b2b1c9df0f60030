"""A user's BatchNorm + dropout model from a file on the cluster: Dask = reference bit for
bit (augmentation included), resume, and the CLI path from `dane train` to `dane evaluate`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from run_configs import run_config

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

# Two rounds of the model file's `build` (unless a test says otherwise), each algorithm with
# its steps.
RUN = dict(rounds=2, seed=5)
SETTINGS = {
    "dane": dict(algorithm="dane", eta=1.0, mu=0.1, local_steps=4, local_lr=0.05, batch_size=16),
    "fedavg": dict(
        algorithm="fedavg", local_steps=4, local_lr=0.05, batch_size=16, server_momentum=0.5
    ),
    "sgd": dict(algorithm="sgd", local_lr=0.1, batch_size=16),
}


@pytest.mark.parametrize(
    ("algorithm", "augment"), [("dane", "flip,crop=1"), ("fedavg", ""), ("sgd", "crop=2")]
)
def test_a_batchnorm_dropout_model_equals_the_reference_bit_for_bit(
    algorithm, augment, model_file, digits_stores, cluster_client, tmp_path
):
    config = run_config(
        digits_stores[4], RUN, SETTINGS[algorithm], model=f"{model_file}:build", augment=augment,
        out=tmp_path / "run",
    )  # fmt: skip

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    saved = load_checkpoint(RunDir(tmp_path / "run").latest)
    assert torch.equal(saved["weights"], reference.weights)
    assert saved["buffers"].keys() == reference.buffers.keys()
    for name, value in reference.buffers.items():
        assert torch.equal(saved["buffers"][name], value), name
    assert not torch.equal(saved["buffers"]["1.running_mean"], torch.zeros(6))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for row, expected in zip(rows, reference.history, strict=True):
        assert row["train_loss"] == expected["train_loss"]
        assert row["test_accuracy"] == expected["test_accuracy"]
        assert row["comm_bytes"] == expected["comm_bytes"]


def test_resume_restores_weights_and_statistics(
    model_file, digits_stores, cluster_client, tmp_path
):
    dane = {**RUN, **SETTINGS["dane"], "model": f"{model_file}:build"}
    whole = run_config(digits_stores[2], dane, rounds=3, out=tmp_path / "whole")
    first = run_config(digits_stores[2], dane, rounds=1, out=tmp_path / "split")
    rest = run_config(digits_stores[2], dane, rounds=3, out=tmp_path / "split")

    train(whole, client=cluster_client)
    train(first, client=cluster_client)
    train(rest, client=cluster_client, resume=True)

    uninterrupted = load_checkpoint(RunDir(tmp_path / "whole").latest)
    resumed = load_checkpoint(RunDir(tmp_path / "split").latest)
    assert torch.equal(resumed["weights"], uninterrupted["weights"])
    for name, value in uninterrupted["buffers"].items():
        assert torch.equal(resumed["buffers"][name], value)


def test_the_cli_records_the_import_path_and_evaluates_the_same_model(
    model_file, digits_stores, tmp_path, dane_here
):
    # main() in this process (dane_here): what the command records and prints is checked.
    trained = dane_here(
        "train", str(digits_stores[2]), "--model", f"{model_file}:build", "--rounds", "2",
        "--local-steps", "5", "--batch-size", "16", "--out", "run", "--augment", "flip",
        "--dashboard-address", "127.0.0.1:0", cwd=tmp_path,
    )  # fmt: skip
    evaluated = dane_here("evaluate", "run", "--checkpoint", "latest", cwd=tmp_path)

    assert trained.returncode == 0, trained.stderr
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    assert saved["model"]["model"] == f"{model_file}:build"
    assert saved["model"]["augment"] == "flip"
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert evaluated.returncode == 0, evaluated.stderr
    assert f"test accuracy {last['test_accuracy']:.4f}" in evaluated.stdout


def test_the_cli_refuses_a_broken_model_with_one_line(
    model_file, digits_stores, tmp_path, dane_here
):
    # In this process: the driver refuses the model before it starts a cluster.
    result = dane_here(
        "train", str(digits_stores[2]), "--model", f"{model_file}:wrong_output",
        "--out", str(tmp_path / "run"), cwd=tmp_path,
    )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "gives outputs of shape (2, 11)" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_resnet18_with_batchnorm_trains_two_rounds_on_two_workers(cluster_client, tmp_path):
    # torchvision's ResNet-18 layout (docs/examples/resnet18.py, torchvision's signature),
    # 11.2 M weights, on 32x32x3 images: the bytes of a DANE round are exactly the weights'
    # and the BatchNorm buffers' (the all-gather form, the default on 2 workers even at this
    # size: each of the 2 phases sends each worker's partial sum to the other).
    import numpy as np

    import dask_dane

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(80, 3, 32, 32), dtype=np.uint8)
    y = rng.integers(0, 10, size=80)
    store = dask_dane.prepare(
        tmp_path / "rgb.zarr", train=(x[:64], y[:64]), test=(x[64:], y[64:]), num_classes=10
    )
    model = str(EXAMPLES / "resnet18.py") + ":resnet18"

    result = dask_dane.train(
        store, model=model, algorithm="dane", client=cluster_client, out=tmp_path / "run",
        rounds=2, local_steps=2, batch_size=16, mu=0.1,
    )  # fmt: skip

    weights = sum(p.numel() for p in result.model.parameters())
    buffers = result.model.state_dict()
    float_bytes = sum(b.numel() * 4 for k, b in buffers.items() if "running" in k)
    counters = sum(8 for k in buffers if k.endswith("num_batches_tracked"))
    assert 11_000_000 < weights < 11_300_000
    model_bytes = weights * 4
    moved = float_bytes + counters
    per_round = 2 * (model_bytes + moved) + 2 * model_bytes  # gradient phase moves no buffers
    assert [r["comm_bytes"] for r in result.history] == [per_round, per_round]
    assert buffers["bn1.num_batches_tracked"].item() == 4  # 2 local steps in each of 2 rounds
    assert all(np.isfinite(r["train_loss"]) for r in result.history)
