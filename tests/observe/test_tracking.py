"""Tracking: TensorBoard scalars and the MLflow run equal metrics.jsonl, round by round."""

from __future__ import annotations

import json
import math

import pytest

import dask_dane
from dask_dane.pipeline.engine.run.metrics import read_metrics
from dask_dane.pipeline.observe import tracking

# Two rounds of FedAvg on the 2-shard digits store, then a resume to 3: cheap, and enough to
# see steps continue. One MLflow store per run dir keeps the tests independent.
RUN = {"model": "mlp", "algorithm": "fedavg", "local_steps": 2, "progress": False}


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """The event files' scalars. tensorboard's Writer writes summary-v2 tensors tagged for the
    scalars plugin (what TensorBoard's Scalars tab shows), so they read back as tensors."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(folder), size_guidance={"tensors": 0}).Reload()
    tags = events.Tags()["tensors"]
    assert {events.SummaryMetadata(tag).plugin_data.plugin_name for tag in tags} == {"scalars"}
    return {
        tag: [
            (event.step, make_ndarray(event.tensor_proto).item()) for event in events.Tensors(tag)
        ]
        for tag in tags
    }


def _expected(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in tracking.numeric(row).items():
            series.setdefault(key, []).append((row["round"], value))
    return series


@pytest.mark.cluster
def test_tensorboard_and_mlflow_hold_every_round(digits_stores, cluster_client, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = tmp_path / "run"
    common = {**RUN, "client": cluster_client, "out": run, "mlflow": uri}
    dask_dane.train(digits_stores[2], rounds=2, **common)
    dask_dane.train(digits_stores[2], rounds=3, resume=True, **common)

    rows = read_metrics(run / "metrics.jsonl")
    assert [row["round"] for row in rows] == [1, 2, 3]
    expected = _expected(rows)
    assert {"train_loss", "test_accuracy", "comm_bytes", "wall_s"} <= expected.keys()

    scalars = _scalars(run / "tb")  # the resume appended: steps 1, 2 then 3
    assert scalars.keys() == expected.keys()
    for key, points in expected.items():
        assert [step for step, _ in scalars[key]] == [step for step, _ in points], key
        assert [v for _, v in scalars[key]] == pytest.approx([v for _, v in points], rel=1e-6)

    client = MlflowClient(tracking_uri=uri)
    run_id = json.loads((run / "mlflow.json").read_text())["run_id"]
    found = client.get_run(run_id)
    assert found.info.status == "FINISHED"
    assert len(client.search_runs([found.info.experiment_id])) == 1  # the resume reopened it
    for key, points in expected.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert [step for step, _ in history] == [1, 2, 3], key
        assert [v for _, v in history] == pytest.approx([v for _, v in points]), key
    params = found.data.params
    assert (params["algorithm"], params["model"], params["rounds"]) == ("fedavg", "mlp", "2")
    assert params["local_steps"] == "2" and params["mlflow"] == uri
    assert found.data.tags["dane.store"] == str(digits_stores[2])
    assert found.data.tags["dane.resumed.rounds"] == "3"  # params stay the original ones
    artifacts = [a.path for a in client.list_artifacts(run_id, "model")]
    assert artifacts == ["model/model.pt"]
    model_file = client.download_artifacts(run_id, "model/model.pt", str(tmp_path))
    import torch

    saved = torch.load(model_file, weights_only=False)
    assert saved["num_classes"] == 10 and saved["state_dict"]


@pytest.mark.cluster
def test_tensorboard_none_writes_no_tb(digits_stores, cluster_client, tmp_path):
    run = tmp_path / "run"
    dask_dane.train(
        digits_stores[2], rounds=1, client=cluster_client, out=run, tensorboard="none", **RUN
    )
    assert (run / "metrics.jsonl").exists() and not (run / "tb").exists()
    assert not (run / "mlflow.json").exists()


def test_a_missing_package_is_one_line_and_writes_nothing(
    run_cli, capfd, assert_one_line_error, monkeypatch, tmp_path
):
    real = tracking.installed
    monkeypatch.setattr(tracking, "installed", lambda module: module != "mlflow" and real(module))
    out = tmp_path / "run"
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    status = run_cli(["train", "--rounds", "1", "--out", str(out), "--mlflow", uri])
    assert_one_line_error(status, capfd, ["--mlflow", "pip install 'dask-dane[track]'"])
    assert not out.exists() and not (tmp_path / "m.db").exists()
    with pytest.raises(ValueError, match=r"mlflow=? needs mlflow.*dask-dane\[track\]"):
        dask_dane.train(rounds=1, out=out, mlflow=uri, progress=False)
    assert not out.exists()


def test_tracking_failure_is_one_line_and_the_run_goes_on(tmp_path, capsys):
    class Broken:
        def add_scalar(self, *args):
            raise OSError("disk full")

    trackers = tracking.Trackers(
        None, None, resume=False, context=tracking.TrackingContext()
    )  # only on_round's guard is exercised
    trackers.tb = Broken()
    trackers.on_round({"round": 1, "train_loss": 0.5})
    trackers.on_round({"round": 2, "train_loss": 0.4})  # stopped: no second line
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["dask-dane: tensorboard tracking stopped (OSError: disk full)"]
    assert trackers.tb is None


def test_a_diverging_figure_is_written_as_infinity_without_a_warning(tmp_path):
    import warnings

    writer = tracking._tb_writer(tmp_path / "tb")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" fails here
        tracking._tb_round(writer, {"train_loss": 1e300, "grad_norm": -1e39, "lr": 0.5}, 1)
    writer.close()

    scalars = _scalars(tmp_path / "tb")
    assert scalars["train_loss"] == [(1, math.inf)] and scalars["grad_norm"] == [(1, -math.inf)]
    assert scalars["lr"] == [(1, 0.5)]
