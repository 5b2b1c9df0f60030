"""Driver faults, with real processes on 127.0.0.1: the driver killed during a checkpoint
write resumes to the same weights; training diverging stops naming the round and keeps the
last good checkpoint.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import fault_cluster
import pytest
import torch
from run_configs import run_config

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.metrics import read_metrics
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster
HERE = Path(__file__).resolve().parents[2]  # tests/


PY = fault_cluster.PY
_start, _stop = fault_cluster.start, fault_cluster.stop


# Run `dane train` with the round-2 checkpoint written slowly: half the bytes, a marker file,
# then a long sleep, so that the test can SIGKILL the driver in the middle of the write.
SLOW_CHECKPOINT = """
import sys, time
from pathlib import Path
from dask_dane.pipeline.engine.run import checkpoint, run_state

marker = Path(sys.argv[1])
save = run_state.save_checkpoint

def slow_save(path, payload):
    if payload["round"] != 2 or path.name != "latest.pt":
        return save(path, payload)
    def write(handle):
        import io, torch
        buffer = io.BytesIO()
        torch.save({"checkpoint_version": checkpoint.CHECKPOINT_VERSION, **payload}, buffer)
        data = buffer.getvalue()
        handle.write(data[: len(data) // 2])
        handle.flush()
        marker.write_text("writing")
        time.sleep(600)
        handle.write(data[len(data) // 2 :])
    checkpoint.atomic_write_bytes(path, write)

run_state.save_checkpoint = slow_save
sys.argv = ["dane", *sys.argv[2:]]
from dask_dane.cli import main
main()
"""


def test_driver_killed_during_checkpoint_write_resumes_to_the_same_weights(
    cluster_client, digits_stores, tmp_path, dane_here
):
    store = digits_stores[2]
    reference = run_config(
        store, fault_cluster.SETTINGS, out=tmp_path / "ref", rounds=3, local_steps=10
    )
    train(reference, client=cluster_client)
    out = tmp_path / "run"
    marker = tmp_path / "writing"
    args = ["train", str(store), "--out", str(out), "--rounds", "3", "--local-steps", "10"]
    args += ["--seed", "5", "--dtype", "float64"]
    args += ["--scheduler", cluster_client.scheduler.address]  # the driver alone dies
    driver = _start([PY, "-c", SLOW_CHECKPOINT, str(marker), *args], tmp_path / "driver.log")
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()
            assert time.monotonic() < deadline, "round 2 was never checkpointed"
            time.sleep(0.05)
    finally:
        _stop([driver])  # SIGKILL

    checkpoints = out / "checkpoints"
    partial = list(checkpoints.glob(".latest.pt.tmp-*"))
    assert len(partial) == 1  # killed mid-write: half a file beside the checkpoint...
    assert load_checkpoint(checkpoints / "latest.pt")["round"] == 1  # ...which is whole
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    # The resume in this process: the killed driver's own process was the point above.
    resumed = dane_here("train", "--out", str(out), "--resume", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    final = load_checkpoint(checkpoints / "latest.pt")
    reference = load_checkpoint(tmp_path / "ref" / "checkpoints" / "latest.pt")
    assert final["round"] == 3
    assert torch.equal(final["weights"], reference["weights"])
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert not list(checkpoints.glob(".*.tmp-*"))  # the partial write was cleaned up


def test_diverging_run_stops_naming_the_round_and_keeps_the_last_good_checkpoint(
    cluster_client, tmp_path, dane_here
):
    store = tmp_path / "ridge.zarr"
    raw = load_source("synthetic-ridge", SourceOptions(samples=200))
    write_store(raw, PartitionSpec(num_shards=2), store, force=False)
    out = tmp_path / "run"
    # Gradient descent with a step far above 2/L: the weights grow ~1e100-fold per round.
    args = ["train", str(store), "--algorithm", "gd", "--model", "linear", "--local-lr", "1e100"]
    args += ["--dtype", "float64", "--rounds", "10", "--out", str(out)]
    args += ["--scheduler", cluster_client.scheduler.address]

    done = dane_here(*args, cwd=tmp_path)  # main()'s exit status and line, in this process

    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    match = re.match(r"error: training diverged in round (\d+): .*--mu.*--local-lr", last)
    assert match, last
    diverged = int(match.group(1))
    assert diverged >= 2
    saved = load_checkpoint(out / "checkpoints" / "latest.pt")
    assert saved["round"] == diverged - 1
    assert torch.isfinite(saved["weights"]).all()
    assert f"(round {diverged - 1}) is kept in" in last
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, diverged))
