"""One run of `dane bench network` on a NetnsCluster: processes in namespaces, bytes counted.

A dask-dane run is what a user on a real cluster would run: `dask scheduler` in the scheduler's
namespace, one `dask worker` per worker namespace (work stealing off, as cluster.py sets it
for the clusters it starts), and `dane train STORE --scheduler tcp://...` as the driver, in the
scheduler's namespace. A DDP run is one `python -m dask_dane.bench.ddp.rank` per worker
namespace, gloo over the same links. Either way every process is stopped when the run ends,
fails or is interrupted, and the bytes each node sent onto its link are read before and after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, replace
from pathlib import Path
from typing import IO, Any

from ...pipeline.setup.config import RunConfig, to_toml
from ...pipeline.setup.run_setup import prepare_run
from ..ddp.rank import MASTER_ENV
from ..ddp.run import summarize
from ..ddp.spec import DdpSpec
from .netns import SCHEDULER_NODE, NetnsCluster

SCHEDULER_PORT = 8786
DDP_PORT = 29500
STOP_GRACE_S = 5.0
IDLE_S = 10.0  # how long idle_control_rate listens
# cluster.CLUSTER_CONFIG for a scheduler started by hand, and the allocator settings its
# nannies pass to the workers.
DASK_ENV = {
    "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False",
    "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20),
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
}


class RunFailed(RuntimeError):
    """A process of the run exited badly; the message quotes its last line of output."""


def scheduler_address(cluster: NetnsCluster) -> str:
    return f"tcp://{cluster.address(SCHEDULER_NODE)}:{SCHEDULER_PORT}"


@contextmanager
def processes(log_dir: Path) -> Iterator[Callable[..., subprocess.Popen]]:
    """A starter of processes (each in a session of its own, output to log_dir/NAME.log),
    all stopped on the way out: SIGTERM to the group, then SIGKILL after STOP_GRACE_S."""
    started: list[tuple[subprocess.Popen, IO[str]]] = []

    def start(name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (log_dir / f"{name}.log").open("w")
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True,
        )  # fmt: skip
        started.append((proc, log))
        return proc

    try:
        yield start
    finally:
        for proc, _ in started:
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc, log in started:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
            log.close()


def _signal(proc: subprocess.Popen, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def last_line(log_dir: Path, name: str) -> str:
    path = log_dir / f"{name}.log"
    text = path.read_text() if path.exists() else ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def start_dask(
    cluster: NetnsCluster,
    start: Callable[..., subprocess.Popen],
    timeout: float,
    env: dict[str, str] = DASK_ENV,
) -> None:
    """`dask scheduler` and `dask worker`s in their namespaces; returns once all are connected."""
    py = sys.executable
    host = cluster.address(SCHEDULER_NODE)
    start("scheduler", [*cluster.exec_prefix(SCHEDULER_NODE), py, "-m",
          "distributed.cli.dask_scheduler", "--host", host, "--port", str(SCHEDULER_PORT),
          "--dashboard-address", f"{host}:8787"], env)  # fmt: skip
    for node in cluster.worker_nodes:
        start(f"worker-{node}", [*cluster.exec_prefix(node), py, "-m",
              "distributed.cli.dask_worker", scheduler_address(cluster), "--name", node,
              "--host", cluster.address(node), "--nthreads", "1", "--no-dashboard"],
              env)  # fmt: skip
    wait_for_workers(cluster, cluster.workers, timeout)


def wait_for_workers(cluster: NetnsCluster, count: int, timeout: float) -> None:
    code = (
        "import sys; from distributed import Client\n"
        f"with Client({scheduler_address(cluster)!r}, timeout={timeout}) as c:\n"
        f"    c.wait_for_workers({count}, timeout={timeout})\n"
    )
    done = subprocess.run(
        [*cluster.exec_prefix(SCHEDULER_NODE), sys.executable, "-c", code],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        raise RunFailed(f"{count} Dask workers did not connect within {timeout:g} s: {lines[-1]}")


def idle_control_rate(cluster: NetnsCluster, log_dir: Path, *, timeout: float,
                      seconds: float = IDLE_S) -> float:  # fmt: skip
    """Bytes a second an idle Dask cluster puts on the links (heartbeats and the scheduler's
    replies): the part of a run's wire bytes that grows with its wall time, not its rounds."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with processes(log_dir) as start:
        start_dask(cluster, start, timeout)
        time.sleep(1.0)  # the workers' first exchanges with the scheduler are not idle ones
        before = cluster.sent_bytes()
        time.sleep(seconds)
        after = cluster.sent_bytes()
    return _wire(before, after)["bytes"] / seconds


def run_dask(
    cluster: NetnsCluster,
    config: RunConfig,
    log_dir: Path,
    *,
    timeout: float,
    worker_ttl_s: float | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """One `dane train --scheduler` run on fresh scheduler and workers; its wire bytes and
    exit code (the run directory is config.out). `worker_ttl_s`: the scheduler's heartbeat
    timeout (Dask's own default if None); `resume`: `dane train --out ... --resume`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    config_path = log_dir / "config.toml"
    config_path.write_text(to_toml(replace(config, scheduler=None)))
    if resume:
        what = ["--out", config.out, "--resume"]
    else:
        what = [str(config.store), "--config", str(config_path)]
    env = {**DASK_ENV}
    if worker_ttl_s is not None:
        env["DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL"] = f"{worker_ttl_s:g}s"
    with processes(log_dir) as start:
        start_dask(cluster, start, timeout, env)
        before = cluster.sent_bytes()
        started = time.perf_counter()
        driver = start("driver", [*cluster.exec_prefix(SCHEDULER_NODE), sys.executable, "-m",
                       "dask_dane.cli", "train", *what, "--timeout", f"{timeout:g}",
                       "--scheduler", scheduler_address(cluster)])  # fmt: skip
        code = driver.wait()
        wall = time.perf_counter() - started
        after = cluster.sent_bytes()
    return {"exit_code": code, "process_wall_s": wall, "wire": _wire(before, after),
            "driver_last_line": last_line(log_dir, "driver")}  # fmt: skip


def run_ddp_ranks(cluster: NetnsCluster, spec: DdpSpec, log_dir: Path) -> dict[str, Any]:
    """DDP over the links: rank r in worker namespace w<r>; bench/ddp/run.py's result dict."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {MASTER_ENV: cluster.address("w0"), "GLOO_SOCKET_IFNAME": "eth0"}
    payload = json.dumps(asdict(spec))
    with tempfile.TemporaryDirectory(prefix="dane-netddp-") as tmp, processes(log_dir) as start:
        before = cluster.sent_bytes()
        started = time.perf_counter()
        ranks = [
            start(f"rank{r}", [*cluster.exec_prefix(node), sys.executable, "-m",
                  "dask_dane.bench.ddp.rank", str(r), str(DDP_PORT), tmp, payload], env)
            for r, node in enumerate(cluster.worker_nodes)
        ]  # fmt: skip
        codes = _wait_all(ranks)
        wall = time.perf_counter() - started
        after = cluster.sent_bytes()
        failed = [r for r, code in enumerate(codes) if code != 0]
        if failed:
            why = last_line(log_dir, f"rank{failed[0]}")
            raise RunFailed(f"DDP rank {failed[0]} failed: {why}")
        reports = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(len(ranks))]
    result = summarize(spec, prepare_run(spec.run_config()), reports, process_wall_s=wall)
    return {**result, "wire": _wire(before, after)}


def _wait_all(procs: list[subprocess.Popen]) -> list[int]:
    # A rank that fails leaves the others blocked in a collective: stop them at once.
    while True:
        codes = [p.poll() for p in procs]
        if any(c not in (None, 0) for c in codes) or all(c == 0 for c in codes):
            return [c if c is not None else -1 for c in codes]
        time.sleep(0.2)


def _wire(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    sent = {node: after[node] - before[node] for node in after}
    return {"bytes": sum(sent.values()), "by_node": sent}
