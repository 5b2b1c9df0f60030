"""`dane bench memory` (issue 36 item 4): one store, shards held converted, resident and
streamed on the same workers. No timing is asserted (machines are shared): what each way
holds, as Dask counts it on the workers, against the store's bytes, and the outputs."""

from __future__ import annotations

import json
from functools import partial

import pytest
from typer.testing import CliRunner

from dask_dane.bench.scaling import run as scaling_run
from dask_dane.bench.scaling import shard_memory
from dask_dane.bench.scaling.shard_memory import MemorySpec, markdown_table, summarise
from dask_dane.cli.commands import app
from dask_dane.pipeline.setup.config import RunConfig

pytestmark = pytest.mark.bench


# The last round's callback waits up to 10 s for the round's keys to leave the scheduler, then
# reads what each worker holds. Under the torch collective (auto's choice here) the run's
# segment tasks stay until the run returns, so each way waited the whole 10 s (measured) for
# the same reading: 1 s here.
HELD_WAIT_S = 1.0


@pytest.mark.cluster
def test_each_way_holds_what_the_store_says_as_dask_counts_it(digits_stores, tmp_path, monkeypatch):
    wait_less = partial(scaling_run._held_after_rounds, timeout_s=HELD_WAIT_S)
    monkeypatch.setattr(scaling_run, "_held_after_rounds", wait_less)
    out = tmp_path / "m.json"
    result = CliRunner().invoke(
        app,
        [
            "bench", "memory", "--store", str(digits_stores[2]), "--model", "small-cnn",
            "--rounds", "2", "--local-steps", "2", "--workdir", str(tmp_path / "work"),
            "--json", str(out), "--plot", str(tmp_path / "m.png"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    ways = {w["mode"]: w for w in json.loads(out.read_text())["ways"]}

    assert list(ways) == ["converted", "resident", "stream"]
    pixels = 1797 * 64  # digits: 1 x 8 x 8 uint8 images; a piece of the test split per shard
    held = {
        mode: sum(w["dask_held_mib"] for w in way["workers"]) * 2**20 for mode, way in ways.items()
    }
    # Converted holds 4 bytes a pixel, resident 1, streamed none (labels and a few chunks).
    assert held["converted"] - held["resident"] == pytest.approx(3 * pixels, rel=0.02)
    assert held["stream"] < held["resident"] / 3
    for way in ways.values():
        assert not way["restarted"] and way["images_per_s"] > 0
        assert way["images_per_round"] == ways["converted"]["images_per_round"]
        for worker in way["workers"]:  # the computed bytes agree with Dask's own count
            assert worker["dask_held_mib"] == pytest.approx(worker["data_mib"], abs=0.02)
            assert worker["peak_mib"] >= worker["after_loads_mib"] > 0
    assert (tmp_path / "m.png").stat().st_size > 0
    assert "| stream |" in result.output


def test_a_refused_way_is_its_one_line_and_the_others_still_run(monkeypatch, tmp_path):
    def fake_run(spec, workers, model_bytes):
        if spec.run.shard_memory == "converted":
            raise ValueError("shard 0 holds 900.0 MiB of features, more than 80% ...")
        rows = [{"wall_s": 2.0, "images": 1000}, {"wall_s": 4.0, "images": 1000}]
        worker = {"worker": "tcp://a", "peak_mib": 300.0, "bare_mib": 200.0, "data_mib": 1.0,
                  "dask_held_mib": 1.0, "restarted": False}  # fmt: skip
        return {"rounds": rows, "memory": [worker], "memory_trace": {}}

    monkeypatch.setattr("dask_dane.bench.scaling.run.run_workers", fake_run)
    monkeypatch.setattr(MemorySpec, "validate", lambda self: self)
    monkeypatch.setattr(shard_memory, "prepare_run", _fake_setup)
    monkeypatch.setattr(shard_memory, "initial_weights", lambda spec, seed: b"")
    spec = MemorySpec(run=RunConfig(store="s.zarr", memory_limit="1GiB"), workdir=str(tmp_path))

    result = shard_memory.run_memory(spec, log=lambda line: None)
    ways = result["ways"]
    assert ways[0] == {"mode": "converted", "error": ways[0]["error"]}
    assert ways[0]["error"].startswith("shard 0 holds 900.0 MiB")
    assert [w["mode"] for w in ways[1:]] == ["resident", "stream"]
    assert ways[1]["images_per_s"] == pytest.approx(375.0)  # median of 500 and 250 a second
    table = markdown_table({**result, "spec": {**result["spec"], "workers": 2}})
    assert "| converted | refused or failed: shard 0 holds 900.0 MiB" in table
    assert "memory limit 1GiB" in table


def _fake_setup(config):
    from types import SimpleNamespace

    store = SimpleNamespace(num_train=10, sample_shape=(1, 2, 2), x_dtype="uint8", num_shards=2)
    return SimpleNamespace(store=store, spec=None)


def test_summarise_marks_a_restarted_worker():
    worker = {"worker": "tcp://b", "peak_mib": 9.0, "bare_mib": 1.0, "data_mib": 1.0,
              "dask_held_mib": 1.0, "restarted": True}  # fmt: skip
    run = {"rounds": [{"wall_s": 1.0, "images": 8}], "memory": [worker], "memory_trace": {}}
    assert summarise("stream", run)["restarted"] is True


def test_an_unknown_way_is_exit_2_and_one_line(run_cli, capfd, assert_one_line_error):
    status = run_cli(["bench", "memory", "--store", "x.zarr", "--modes", "resident,swap"])
    assert_one_line_error(status, capfd, ["--modes", "converted, resident, stream"])
