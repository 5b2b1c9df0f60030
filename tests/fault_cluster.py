"""What the fault tests share (tests/engine/run/test_worker_faults.py,
tests/engine/run/test_scheduler_faults.py, tests/engine/run/test_driver_faults.py): `dask
scheduler` and `dask worker` processes on 127.0.0.1, started and killed; the `dane` command
line; the run settings they train with; a watch that acts once a round's shard task runs. Not a
test file: they import it by name.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cloudpickle
from distributed import Client

# Imported from tests/, which only the pytest process has on its path, never a worker's: the
# functions sent to the workers (`client.run(_executing)`) go by value, not by name.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
PY = sys.executable
# Keys of a round's per-shard tasks (graph.py): "{phase}-{round}-{shard}-{token}".
LOCAL_KEY = re.compile(r"^local_\w+-(\d+)-\d+-")
SOLVE_KEY = re.compile(r"^local_solve-(\d+)-\d+-")  # DANE's long phase: local_steps of SGD
LOOPBACK = ["--host", "127.0.0.1", "--no-dashboard"]
DASK_SCHEDULER = [PY, "-m", "distributed.cli.dask_scheduler", *LOOPBACK]
DASK_WORKER = [PY, "-m", "distributed.cli.dask_worker", *LOOPBACK]
# The run settings the fault tests train with (tests/run_configs.py's run_config builds them).
SETTINGS = {"model": "small-cnn", "rounds": 3, "local_steps": 40, "seed": 5, "dtype": "float64"}


def start(args: list[str], log: Path) -> subprocess.Popen:
    # A new session per process, so that its whole group (nanny and worker) can be signalled.
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def start_cluster(folder: Path, num_workers: int) -> tuple[str, list[subprocess.Popen]]:
    """`dask scheduler` and `dask worker` processes (each worker under a nanny)."""
    scheduler_file = folder / "scheduler.json"
    procs = [
        start(
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
            start(
                [*DASK_WORKER, address, "--nthreads", "1", "--name", f"w{i}"],
                folder / f"worker{i}.log",
            )
        )
    return address, procs


def _executing(dask_worker) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(ts.key) for ts in dask_worker.state.executing]


def when_local_task_runs(
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


def dane(*args: str) -> list[str]:
    return [PY, "-m", "dask_dane.cli", *args]


@contextmanager
def running_cluster(folder: Path, num_workers: int) -> Iterator[Client]:
    """start_cluster's processes and a client of them, all ended on exit (a stopped worker
    thawed first, so that it can die)."""
    address, procs = start_cluster(folder, num_workers)
    client = Client(address, timeout=60)
    try:
        client.wait_for_workers(num_workers, timeout=60)
        yield client
    finally:
        client.close()
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)
        stop(procs)


def when_rows(out: Path, count: int, act) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Call act(None) once out/metrics.jsonl holds `count` rows (a segment of rounds runs
    inside one task per worker, `--collective torch`: no round task to watch for)."""
    from dask_dane.pipeline.engine.run.metrics import read_metrics

    def watch() -> None:
        deadline = time.monotonic() + 120
        metrics = out / "metrics.jsonl"
        while time.monotonic() < deadline:
            if metrics.exists() and len(read_metrics(metrics)) >= count:
                act(None)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
