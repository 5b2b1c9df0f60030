"""`--collective torch` under faults, with real `dask scheduler` and `dask worker` processes
on 127.0.0.1: a worker killed mid-segment (either rank) and a worker frozen by SIGSTOP give
the undisturbed run's weights; two runs sharing the workers both finish, each with its own
weights; a killed driver resumes to the same weights."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import fault_cluster
import pytest
import torch
from distributed import Client
from run_configs import run_config

from dask_dane.pipeline.engine.run.bounded import cluster_identity
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.metrics import read_metrics
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.training import Callbacks, train

pytestmark = pytest.mark.cluster
SETTINGS = {
    **fault_cluster.SETTINGS, "collective": "torch", "collective_timeout": 3.0, "rounds": 6,
    "local_steps": 20,
}  # fmt: skip


@pytest.fixture
def workers(tmp_path):
    """A scheduler and two nanny-managed workers, new for each test (a frozen or killed
    worker leaves the cluster changed)."""
    folder = tmp_path / "cluster"
    folder.mkdir()
    with fault_cluster.running_cluster(folder, 2) as client:
        yield client


@pytest.fixture(scope="module")
def undisturbed(cluster_client, digits_stores, tmp_path_factory):
    """(shards, rounds) -> the undisturbed run's final weights on that digits store, trained
    once for the module on the shared cluster: a run's weights do not depend on the cluster
    it ran on (a killed rank's run, finished on one worker, equals them), so the tests'
    faulted runs on their own clusters are compared with one run each, not one per test."""
    folder = tmp_path_factory.mktemp("undisturbed")
    weights: dict[tuple[int, int], torch.Tensor] = {}

    def of(shards: int, rounds: int = 6) -> torch.Tensor:
        if (shards, rounds) not in weights:
            out = folder / f"digits-{shards}-{rounds}"
            config = run_config(digits_stores[shards], SETTINGS, out=out, rounds=rounds)
            train(config, client=cluster_client)
            weights[shards, rounds] = _weights(out)
        return weights[shards, rounds]

    return of


def _weights(out: Path) -> torch.Tensor:
    return load_checkpoint(RunDir(out).latest)["weights"]


def _after_first_row(act) -> tuple[Callbacks, list[threading.Thread]]:
    """Callbacks that start act() in a thread once round 1 is recorded (rounds 2.. still run
    inside the segment's tasks)."""
    threads: list[threading.Thread] = []

    def on_round(row: dict) -> None:
        if row["round"] == 1:
            threads.append(threading.Thread(target=act, daemon=True))
            threads[-1].start()

    return Callbacks(on_round=on_round), threads


@pytest.mark.parametrize("rank", [0, 1])
def test_a_worker_killed_mid_segment_gives_the_undisturbed_weights(
    workers, undisturbed, digits_stores, tmp_path, rank
):
    # Rank 0 holds the group's store, rank 1 only its part: either killed, the survivor's
    # all-gather fails, the segment is settled and run again from the last recorded round.
    store = digits_stores[4]
    address = sorted(cluster_identity(workers)["workers"])[rank]
    pid = workers.run(os.getpid, workers=[address])[address]
    callbacks, threads = _after_first_row(lambda: os.kill(pid, signal.SIGKILL))

    summary = train(
        run_config(store, SETTINGS, out=tmp_path / "run"), client=workers, callbacks=callbacks
    )

    threads[0].join(timeout=10)
    assert summary["rounds"] == 6
    assert torch.equal(_weights(tmp_path / "run"), undisturbed(4))
    rows = read_metrics(RunDir(tmp_path / "run").metrics)
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5, 6]  # each recorded once, in order
    assert any(r["attempts"] >= 2 or r["shards_reloaded"] >= 1 for r in rows[1:]), rows


def test_a_frozen_worker_is_found_by_the_timeout_and_the_run_goes_on(
    workers, undisturbed, digits_stores, tmp_path
):
    # SIGSTOP: its sockets stay open, so only --collective-timeout finds it; the driver
    # removes it from the cluster and the other worker takes its shards.
    store = digits_stores[4]
    address = sorted(cluster_identity(workers)["workers"])[1]
    pid = workers.run(os.getpid, workers=[address])[address]
    callbacks, _ = _after_first_row(lambda: os.kill(pid, signal.SIGSTOP))
    notes: list[str] = []  # the engine's lines reach the user through Callbacks.on_note
    callbacks = dataclasses.replace(callbacks, on_note=notes.append)
    started = time.monotonic()
    try:
        summary = train(
            run_config(store, SETTINGS, out=tmp_path / "run"), client=workers, callbacks=callbacks
        )
    finally:
        os.kill(pid, signal.SIGCONT)

    assert time.monotonic() - started < 120
    assert summary["rounds"] == 6
    assert torch.equal(_weights(tmp_path / "run"), undisturbed(4))
    assert any(f"removing 1 worker(s) that stopped answering ({address})" in n for n in notes)
    rows = read_metrics(RunDir(tmp_path / "run").metrics)
    assert rows[-1]["num_workers"] == 1


def _cli(store: Path, out: Path, client: Client, rounds: int) -> list[str]:
    args = ["train", str(store), "--out", str(out), "--rounds", str(rounds)]
    args += ["--local-steps", "20", "--seed", "5", "--dtype", "float64"]
    return fault_cluster.dane(
        *args, "--collective", "torch", "--scheduler", client.scheduler.address
    )


def test_two_runs_sharing_the_workers_both_finish_with_their_own_weights(
    workers, undisturbed, digits_stores, tmp_path
):
    # Two drivers (two users' `dane train` on one scheduler): the leases on the workers let
    # one run's segment at a time, so neither all-gather waits on the other run's task
    # queued behind it.
    stores = {"a": digits_stores[4], "b": digits_stores[2]}
    logs = {name: tmp_path / f"{name}.log" for name in stores}
    drivers = {
        name: fault_cluster.start(_cli(store, tmp_path / name, workers, 3), logs[name])
        for name, store in stores.items()
    }

    for name, driver in drivers.items():
        assert driver.wait(timeout=300) == 0, logs[name].read_text()[-3000:]
    assert torch.equal(_weights(tmp_path / "a"), undisturbed(4, rounds=3))
    assert torch.equal(_weights(tmp_path / "b"), undisturbed(2, rounds=3))


def test_a_killed_driver_resumes_to_the_same_weights(workers, undisturbed, digits_stores, tmp_path):
    store, out = digits_stores[2], tmp_path / "run"
    driver = fault_cluster.start(_cli(store, out, workers, 6), tmp_path / "driver.log")
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or len(read_metrics(out / "metrics.jsonl")) < 2:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()
            assert time.monotonic() < deadline, "round 2 was never recorded"
            time.sleep(0.05)
    finally:
        fault_cluster.stop([driver])  # SIGKILL: the segment's tasks see their futures go

    resumed = subprocess.run(
        fault_cluster.dane("train", "--out", str(out), "--resume"),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.equal(_weights(out), undisturbed(2))
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
