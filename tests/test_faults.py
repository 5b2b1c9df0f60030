"""Faults survived, with real processes on 127.0.0.1: a worker killed or stalled mid-round, the
driver killed (during a checkpoint write), the scheduler gone, training diverging.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import torch
from distributed import Client

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.run.checkpoint import load_checkpoint
from dask_dane.pipeline.run.loop import Callbacks, train
from dask_dane.pipeline.run.metrics import read_metrics
from dask_dane.pipeline.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig

pytestmark = pytest.mark.cluster
PY = sys.executable
# Keys of a round's per-shard tasks (graph.py): "{phase}-{round}-{shard}-{token}".
LOCAL_KEY = re.compile(r"^local_\w+-(\d+)-\d+-")
SOLVE_KEY = re.compile(r"^local_solve-(\d+)-\d+-")  # DANE's long phase: local_steps of SGD
LOOPBACK = ["--host", "127.0.0.1", "--no-dashboard"]
DASK_SCHEDULER = [PY, "-m", "distributed.cli.dask_scheduler", *LOOPBACK]
DASK_WORKER = [PY, "-m", "distributed.cli.dask_worker", *LOOPBACK]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    # A new session per process, so that its whole group (nanny and worker) can be signalled.
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _start_cluster(folder: Path, num_workers: int) -> tuple[str, list[subprocess.Popen]]:
    """`dask scheduler` and `dask worker` processes (each worker under a nanny)."""
    scheduler_file = folder / "scheduler.json"
    procs = [
        _start(
            [*DASK_SCHEDULER, "--port", "0", "--scheduler-file", str(scheduler_file)],
            folder / "scheduler.log",
        )
    ]
    deadline = time.monotonic() + 60
    while not scheduler_file.exists():
        assert time.monotonic() < deadline, "the scheduler did not start"
        time.sleep(0.1)
    address = json.loads(scheduler_file.read_text())["address"]
    for i in range(num_workers):
        procs.append(
            _start(
                [*DASK_WORKER, address, "--nthreads", "1", "--name", f"w{i}"],
                folder / f"worker{i}.log",
            )
        )
    return address, procs


@pytest.fixture(scope="module")
def nanny_cluster(tmp_path_factory):
    """A scheduler and two nanny-managed workers: a killed worker is restarted by its nanny."""
    folder = tmp_path_factory.mktemp("nanny-cluster")
    address, procs = _start_cluster(folder, 2)
    client = Client(address, timeout=60)
    try:
        client.wait_for_workers(2, timeout=60)
        yield client
    finally:
        client.close()
        _stop(procs)


def _config(store: Path, out: Path, **overrides) -> RunConfig:
    settings = dict(
        store=str(store),
        out=str(out),
        model="small-cnn",
        rounds=3,
        local_steps=40,
        seed=5,
        dtype="float64",
    )
    return RunConfig(**{**settings, **overrides}).validate()


def _executing(dask_worker) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(ts.key) for ts in dask_worker.state.executing]


def _when_local_task_runs(
    client: Client, round_index: int, act, pattern: re.Pattern = LOCAL_KEY
) -> threading.Thread:
    """Call act(worker) once a shard task of `round_index` or a later round is executing on
    some worker (rounds chain on the cluster: round_index may be done by the time the driver
    records the round before it)."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for worker, keys in client.run(_executing).items():
                if any((m := pattern.match(k)) and int(m.group(1)) >= round_index for k in keys):
                    act(worker)
                    return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _pids(client: Client) -> dict[str, int]:
    return client.run(os.getpid)


def _reference_run(out: Path, ref: Path, client: Client, rounds: int) -> RunDir:
    """An undisturbed run of `out`'s own saved settings for `rounds` rounds, into `ref`.

    Only where it runs (`scheduler`), how long a request may wait (`timeout`) and the folder
    differ; none of them enters the arithmetic.
    """
    saved = RunConfig(**RunDir(out).saved_config())
    config = replace(saved, out=str(ref), scheduler=None, rounds=rounds, timeout=60.0)
    train(config.validate(), client=client)
    return RunDir(ref)


def _assert_same_training(run: RunDir, reference: RunDir) -> None:
    """The run ends where the undisturbed one does: same round, weights, buffers (BatchNorm's
    statistics, if the model has any) and the same train loss every round."""
    final, expected = load_checkpoint(run.latest), load_checkpoint(reference.latest)
    assert final["round"] == expected["round"]
    assert torch.equal(final["weights"], expected["weights"])
    assert final["buffers"].keys() == expected["buffers"].keys()
    for name, value in expected["buffers"].items():
        assert torch.equal(final["buffers"][name], value), name
    losses = [r["train_loss"] for r in run.rows()]
    assert losses == [r["train_loss"] for r in reference.rows()]


# A streamed shard is reopened from its recipe on the new worker, its cache empty: its
# minibatch windows are drawn from the round's seed alone, so the weights are the same too.
@pytest.mark.parametrize("shard_memory", ["resident", "stream"])
def test_worker_killed_mid_round_reloads_its_shards_and_gives_the_same_weights(
    nanny_cluster, digits_stores, tmp_path, shard_memory
):
    client = nanny_cluster
    client.wait_for_workers(2, timeout=60)
    held = dict(shard_memory=shard_memory, rounds=4)  # a round to spare for the kill
    undisturbed = train(_config(digits_stores[4], tmp_path / "ref", **held), client=client)
    pids = _pids(client)
    killed: list[str] = []
    threads: list[threading.Thread] = []

    def kill(worker: str) -> None:
        os.kill(pids[worker], signal.SIGKILL)
        killed.append(worker)

    def on_round(row: dict) -> None:
        if row["round"] == 1:
            threads.append(_when_local_task_runs(client, 2, kill))

    summary = train(
        _config(digits_stores[4], tmp_path / "run", **held),
        client=client,
        callbacks=Callbacks(on_round=on_round),
    )

    threads[0].join(timeout=5)
    assert len(killed) == 1  # the kill happened while round 2's shard tasks ran
    assert summary["rounds"] == 4
    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    reference = load_checkpoint(RunDir(tmp_path / "ref").latest)["weights"]
    assert torch.equal(weights, reference)
    assert summary["final_train_loss"] == undisturbed["final_train_loss"]
    rows = read_metrics(RunDir(tmp_path / "run").metrics)
    # A round from 2 on records the fault: its shards reloaded elsewhere, or the round run
    # again. Round 2 itself, unless the kill lands after the killed worker's part of it was
    # gathered: then round 3 finds the shard gone (seen once with streamed shards, under load).
    assert any(r["shards_reloaded"] >= 1 or r["attempts"] >= 2 for r in rows[1:]), rows
    assert rows[0]["shards_reloaded"] == 0 and rows[0]["attempts"] == 1
    client.wait_for_workers(2, timeout=60)  # the nanny restarted the worker
    assert killed[0] not in client.scheduler_info(n_workers=-1)["workers"]


def test_stalled_worker_makes_the_round_wait_and_shows_as_straggler(
    nanny_cluster, digits_stores, tmp_path
):
    client = nanny_cluster
    client.wait_for_workers(2, timeout=60)
    pids = _pids(client)
    stall_s = 2.5
    stalled: list[str] = []
    threads: list[threading.Thread] = []

    def stall(worker: str) -> None:
        os.kill(pids[worker], signal.SIGSTOP)
        stalled.append(worker)
        time.sleep(stall_s)
        os.kill(pids[worker], signal.SIGCONT)

    def on_round(row: dict) -> None:
        if row["round"] == 1:
            threads.append(_when_local_task_runs(client, 2, stall, SOLVE_KEY))

    # Long local solves, so that the stall lands inside one (its compute time includes it).
    config = _config(digits_stores[2], tmp_path / "run", rounds=2, local_steps=300)
    train(config, client=client, callbacks=Callbacks(on_round=on_round))

    threads[0].join(timeout=10)
    assert len(stalled) == 1
    first, second = read_metrics(RunDir(tmp_path / "run").metrics)
    assert second["wall_s"] >= stall_s  # the round waited for the stalled worker
    # The stalled task's compute time includes the stall; the median shows the other worker.
    assert second["max_worker_compute_s"] >= stall_s
    assert second["max_worker_compute_s"] - second["median_worker_compute_s"] >= stall_s / 3
    assert first["attempts"] == 1
    assert second["attempts"] == 1 and second["num_workers"] == 2


# Run `dane train` with the round-2 checkpoint written slowly: half the bytes, a marker file,
# then a long sleep, so that the test can SIGKILL the driver in the middle of the write.
SLOW_CHECKPOINT = """
import sys, time
from pathlib import Path
from dask_dane.pipeline.run import checkpoint, run_state

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


def _dane(*args: str) -> list[str]:
    return [PY, "-m", "dask_dane.cli", *args]


def test_driver_killed_during_checkpoint_write_resumes_to_the_same_weights(
    cluster_client, digits_stores, tmp_path
):
    store = digits_stores[2]
    train(_config(store, tmp_path / "ref", rounds=3, local_steps=10), client=cluster_client)
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
    resumed = subprocess.run(
        _dane("train", "--out", str(out), "--resume"),
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert resumed.returncode == 0, resumed.stderr
    final = load_checkpoint(checkpoints / "latest.pt")
    reference = load_checkpoint(tmp_path / "ref" / "checkpoints" / "latest.pt")
    assert final["round"] == 3
    assert torch.equal(final["weights"], reference["weights"])
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert not list(checkpoints.glob(".*.tmp-*"))  # the partial write was cleaned up


def test_scheduler_lost_stops_within_timeout_and_leaves_a_resumable_run(
    cluster_client, digits_stores, tmp_path
):
    address, procs = _start_cluster(tmp_path, 1)
    out = tmp_path / "run"
    timeout_s = 5
    args = ["train", str(digits_stores[2]), "--out", str(out), "--scheduler", address]
    args += ["--rounds", "200", "--local-steps", "10", "--seed", "5", "--dtype", "float64"]
    args += ["--timeout", str(timeout_s)]
    driver = subprocess.Popen(
        _dane(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(read_metrics(out / "metrics.jsonl")) < 2:
            assert driver.poll() is None, driver.communicate()[1]
            assert time.monotonic() < deadline, "no round finished"
            time.sleep(0.05)
        os.killpg(procs[0].pid, signal.SIGKILL)  # the scheduler disappears
        lost_at = time.monotonic()
        _, stderr = driver.communicate(timeout=timeout_s + 60)
        stopped_after = time.monotonic() - lost_at
    finally:
        if driver.poll() is None:
            driver.kill()
        _stop(procs)

    assert driver.returncode == 4, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: lost the Dask cluster at {address} in round ")
    assert f"dane train --out {out} --resume" in last
    # A killed scheduler fails the driver's connection at once; what remains is one check of
    # the scheduler (at most --timeout) and exiting. Measured 1.4 s with the 2 cores busy.
    assert stopped_after < timeout_s + 5
    saved = load_checkpoint(out / "checkpoints" / "latest.pt")["round"]
    assert saved >= 2
    config = replace(
        RunConfig(**RunDir(out).saved_config()), scheduler=None, rounds=saved + 1
    ).validate()
    summary = train(config, resume=True, client=cluster_client)
    assert summary["rounds"] == saved + 1
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, saved + 2))
    # Killed, then resumed on another cluster: the same training as one never interrupted.
    reference = _reference_run(out, tmp_path / "ref", cluster_client, saved + 1)
    _assert_same_training(RunDir(out), reference)


# A frozen scheduler (SIGSTOP): its process stays alive and its sockets open (the kernel still
# accepts connections and acknowledges bytes), but nothing answers. Unlike a killed scheduler,
# no connection fails: only the driver's own --timeout can notice. README promises a stop
# within twice --timeout (the request that went unanswered, then the check that the
# scheduler answers), plus the seconds closing the client and exiting take; and not before
# one --timeout has passed (nothing else can tell it the scheduler froze). Measured 11.5-11.9 s
# (the 4 tests below, with the 2 cores busy with a benchmark): the bound is 2 x 5 + 5 = 15 s.
FROZEN_TIMEOUT_S = 5
FROZEN_LIMIT_S = 2 * FROZEN_TIMEOUT_S + 5


def _frozen_train_args(store: Path, out: Path, address: str) -> list[str]:
    args = ["train", str(store), "--out", str(out), "--scheduler", address]
    args += ["--rounds", "200", "--local-steps", "100", "--seed", "5", "--dtype", "float64"]
    return [*args, "--timeout", str(FROZEN_TIMEOUT_S)]


def _stopped_within_limit(driver: subprocess.Popen, frozen_at: float) -> tuple[str, float]:
    """The driver's stderr once it exits, and seconds since the freeze; fails if it hangs."""
    try:
        _, stderr = driver.communicate(timeout=FROZEN_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the driver still waits {FROZEN_LIMIT_S} s after the scheduler froze")
    return stderr, time.monotonic() - frozen_at


def _assert_cluster_lost(driver: subprocess.Popen, stderr: str, address: str, out: Path) -> None:
    assert driver.returncode == 4, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: lost the Dask cluster at {address} in round ")
    assert f"the scheduler did not answer within {FROZEN_TIMEOUT_S} s" in last
    assert f"dane train --out {out} --resume" in last


def test_frozen_scheduler_stops_within_timeout_and_the_run_resumes_when_it_thaws(
    cluster_client, digits_stores, tmp_path
):
    address, procs = _start_cluster(tmp_path, 1)
    scheduler = procs[0]
    out = tmp_path / "run"
    watcher = Client(address, timeout=60)  # sees round 3's tasks run, then is left alone
    frozen = threading.Event()

    def freeze(worker: str) -> None:
        os.kill(scheduler.pid, signal.SIGSTOP)
        frozen.set()

    driver = subprocess.Popen(
        _dane(*_frozen_train_args(digits_stores[2], out, address)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Frozen while round 3's local solves run: the driver is waiting for the round.
        _when_local_task_runs(watcher, 3, freeze, SOLVE_KEY)
        deadline = time.monotonic() + 120
        while not frozen.wait(0.05):
            assert driver.poll() is None, driver.communicate()[1]
            assert time.monotonic() < deadline, "round 3 never ran"
        stderr, stopped_after = _stopped_within_limit(driver, time.monotonic())
        saved = load_checkpoint(out / "checkpoints" / "latest.pt")["round"]
        os.kill(scheduler.pid, signal.SIGCONT)  # thawed: the same cluster takes the run back
        resumed = subprocess.run(
            _dane("train", "--out", str(out), "--resume", "--rounds", "3"),
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        if driver.poll() is None:
            driver.kill()
        os.kill(scheduler.pid, signal.SIGCONT)  # never leave it stopped
        watcher.close()
        _stop(procs)

    _assert_cluster_lost(driver, stderr, address, out)
    # The driver records round 3 while the cluster may already run round 4 (rounds are
    # pipelined, pipelined.py): the line names the first round not saved, 3 or the one before.
    assert saved in (1, 2) and f"in round {saved + 1}: " in stderr
    assert FROZEN_TIMEOUT_S <= stopped_after < FROZEN_LIMIT_S
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(out / "checkpoints" / "latest.pt")["round"] == 3
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    # Round 3, cut short by the freeze, was run again on resume from round 2's checkpoint.
    _assert_same_training(RunDir(out), _reference_run(out, tmp_path / "ref", cluster_client, 3))


# Run `dane train` with the scheduler frozen just before the driver's 3rd call of one function
# (round 3), so that this very request meets the silent scheduler (the test above freezes it
# while the driver waits for a round's tasks).
FREEZE_BEFORE = """
import os, signal, sys
from distributed import Client
from dask_dane.pipeline.run import loop

name, pid = sys.argv[1], int(sys.argv[2])
owner = loop if name.startswith("_") else Client
original = getattr(owner, name)
calls = []

def freeze_on_third_call(*args, **kwargs):
    calls.append(name)
    if len(calls) == 3:
        os.kill(pid, signal.SIGSTOP)
    return original(*args, **kwargs)

setattr(owner, name, freeze_on_third_call)
sys.argv = ["dane", *sys.argv[3:]]
from dask_dane.cli import main
main()
"""


@pytest.mark.parametrize(
    "request_name",
    [
        "get",  # a round's graph; the 3rd is round 3's, sent once round 1 is saved
        "gather",  # the round's result, once its futures are done: round 3's
    ],
)
def test_scheduler_frozen_during_a_request_stops_within_timeout_and_resumes_to_the_same_weights(
    request_name, cluster_client, digits_stores, tmp_path
):
    address, procs = _start_cluster(tmp_path, 1)
    scheduler = procs[0]
    out = tmp_path / "run"
    args = [request_name, str(scheduler.pid), *_frozen_train_args(digits_stores[2], out, address)]
    # A request that opens a new connection fails after Dask's connect timeout (30 s); one on
    # a pooled connection waits forever. Lifted, so that only --timeout can stop the driver.
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "600s"}
    driver = subprocess.Popen(
        [PY, "-c", FREEZE_BEFORE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while psutil.Process(scheduler.pid).status() != psutil.STATUS_STOPPED:  # by the driver
            assert driver.poll() is None, driver.communicate()[1]
            assert time.monotonic() < deadline, "the scheduler was never frozen"
            time.sleep(0.01)
        stderr, stopped_after = _stopped_within_limit(driver, time.monotonic())
    finally:
        if driver.poll() is None:
            driver.kill()
        os.kill(scheduler.pid, signal.SIGCONT)  # never leave it stopped
        _stop(procs)

    _assert_cluster_lost(driver, stderr, address, out)
    assert FROZEN_TIMEOUT_S <= stopped_after < FROZEN_LIMIT_S
    # Rounds are pipelined (pipelined.py): round 3 is submitted once round 1 is saved.
    saved = {"get": 1, "gather": 2}[request_name]
    assert load_checkpoint(out / "checkpoints" / "latest.pt")["round"] == saved
    # Resumed on another cluster for round 3: the same training as one never interrupted.
    config = replace(
        RunConfig(**RunDir(out).saved_config()), scheduler=None, timeout=60.0, rounds=3
    ).validate()
    summary = train(config, resume=True, client=cluster_client)
    assert summary["rounds"] == 3
    assert [r["round"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    _assert_same_training(RunDir(out), _reference_run(out, tmp_path / "ref", cluster_client, 3))


def test_diverging_run_stops_naming_the_round_and_keeps_the_last_good_checkpoint(
    cluster_client, tmp_path
):
    store = tmp_path / "ridge.zarr"
    raw = load_source("synthetic-ridge", SourceOptions(samples=200))
    write_store(raw, PartitionSpec(num_shards=2), store, force=False)
    out = tmp_path / "run"
    # Gradient descent with a step far above 2/L: the weights grow ~1e100-fold per round.
    args = ["train", str(store), "--algorithm", "gd", "--model", "linear", "--local-lr", "1e100"]
    args += ["--dtype", "float64", "--rounds", "10", "--out", str(out)]
    args += ["--scheduler", cluster_client.scheduler.address]

    done = subprocess.run(_dane(*args), capture_output=True, text=True, timeout=120)

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


# --checkpoint-every 3 with one evaluation, in the last round: rounds 1 and 2 leave their
# weights on the cluster, so the restart takes round 1's from a surviving worker's copy.
@pytest.mark.parametrize("held", [{}, dict(checkpoint_every=3, eval_every=10)])
def test_allgather_rounds_survive_a_worker_killed_mid_round_with_the_same_weights(
    nanny_cluster, digits_stores, tmp_path, held
):
    # --broadcast allgather chains rounds on the cluster (pipelined.py): a lost worker drops
    # the rounds in flight, and the chain restarts from the last recorded round's state.
    client = nanny_cluster
    client.wait_for_workers(2, timeout=60)
    ref = replace(_config(digits_stores[4], tmp_path / "ref", **held), broadcast="allgather")
    undisturbed = train(ref, client=client)
    pids = _pids(client)
    killed: list[str] = []
    threads: list[threading.Thread] = []

    def kill(worker: str) -> None:
        os.kill(pids[worker], signal.SIGKILL)
        killed.append(worker)

    def on_round(row: dict) -> None:
        if row["round"] == 1:
            threads.append(_when_local_task_runs(client, 2, kill))

    config = replace(ref, out=str(tmp_path / "run"))
    summary = train(config, client=client, callbacks=Callbacks(on_round=on_round))

    threads[0].join(timeout=5)
    assert len(killed) == 1
    assert summary["rounds"] == 3
    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, load_checkpoint(RunDir(tmp_path / "ref").latest)["weights"])
    assert summary["final_train_loss"] == undisturbed["final_train_loss"]
    rows = read_metrics(RunDir(tmp_path / "run").metrics)
    # The fault is recorded on round 2 or 3 (the driver records one round behind the cluster).
    assert any(r["shards_reloaded"] >= 1 or r["attempts"] >= 2 for r in rows[1:])
    assert rows[0]["shards_reloaded"] == 0 and rows[0]["attempts"] == 1
    client.wait_for_workers(2, timeout=60)
