"""`dane train --scheduler` against a real `dask scheduler` and two `dask worker` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_file import saved_config
from dask_dane.pipeline.setup.run_setup import prepare_run

pytestmark = pytest.mark.cluster
DASK = [sys.executable, "-m"]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    # A new session per process, so the whole process group can be stopped at the end.
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _wait_for_file(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {seconds} s"
        time.sleep(0.2)


@pytest.fixture
def separate_cluster(tmp_path):
    """A scheduler and two single-threaded workers, separate processes on 127.0.0.1."""
    scheduler_file = tmp_path / "scheduler.json"
    procs = [
        _start(
            [
                *DASK[:2],
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            tmp_path / "scheduler.log",
        )
    ]
    try:
        _wait_for_file(scheduler_file, 60)
        address = json.loads(scheduler_file.read_text())["address"]
        for i in range(2):
            procs.append(
                _start(
                    [
                        *DASK[:2],
                        "distributed.cli.dask_worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                        "--name",
                        f"w{i}",
                    ],
                    tmp_path / f"worker{i}.log",
                )
            )
        yield address
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)


def test_train_on_a_running_cluster_matches_reference(separate_cluster, digits_stores, tmp_path):
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "dask_dane.cli",
        "train",
        str(digits_stores[4]),
        "--scheduler",
        separate_cluster,
        "--out",
        str(out),
        "--rounds",
        "2",
        "--local-steps",
        "5",
        "--dtype",
        "float64",
        "--seed",
        "3",
        "--timeout",
        "60",
    ]

    done = subprocess.run(args, capture_output=True, text=True, timeout=240)

    assert done.returncode == 0, done.stderr
    assert "test accuracy" in done.stdout
    config = RunConfig(**{**saved_config(RunDir(out))}).validate()
    assert config.scheduler == separate_cluster
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)
    weights = load_checkpoint(RunDir(out).latest)["weights"]
    assert (weights - reference.weights).abs().max() < 1e-10
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert [r["num_workers"] for r in rows] == [2, 2]  # both worker processes computed
    assert torch.isfinite(weights).all()
