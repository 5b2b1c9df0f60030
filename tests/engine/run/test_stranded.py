"""When every worker dies at once (each nanny restarting its worker past its memory limit),
Dask leaves a task pinned to a dead worker with allow_other_workers in its no-worker state
for good, while new workers idle: the driver's wait must fail as a lost worker (OSError, which
its retry and one-line stop handle), not wait forever (issue 36: a store too big for its
workers hung the driver this way)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from distributed import Client, LocalCluster

from dask_dane.pipeline.engine.run.bounded import cluster_identity, stranded, wait_for

pytestmark = pytest.mark.cluster


def _slow(value: int) -> int:
    time.sleep(60)
    return value


def test_a_task_stranded_by_losing_every_worker_fails_the_wait():
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,  # fmt: skip
        Client(cluster) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        first = sorted(cluster_identity(client)["workers"])[0]
        task = client.submit(_slow, 1, workers=[first], allow_other_workers=True, pure=False)
        while not client.processing(workers=[first])[first]:
            time.sleep(0.1)
        assert client.run_on_scheduler(stranded, keys=[task.key]) == []  # running: fine
        pids = client.run(os.getpid)

        for pid in pids.values():  # every worker at once, as memory-killed workers go
            os.kill(pid, signal.SIGKILL)
        started = time.perf_counter()
        with pytest.raises(OSError, match="wait for workers that are gone"):
            wait_for(client, [task], timeout=10)

        assert time.perf_counter() - started < 45  # the new workers' start and a poll, not 60 s
        assert task.key in client.run_on_scheduler(stranded, keys=[task.key])


class _PausedCluster:
    """A client whose scheduler reports every worker paused (limit 512 MiB), nothing stranded."""

    def __init__(self, paused: bool) -> None:
        self.paused = paused

    def run_on_scheduler(self, function, **kwargs):
        if function.__name__ == "_paused":
            return {"tcp://w1": 512 * 2**20, "tcp://w2": 512 * 2**20} if self.paused else {}
        return []


class _Pending:
    key = "evaluate-1-0-abc"

    def done(self) -> bool:
        return False


def test_every_worker_paused_past_the_limit_is_one_line_naming_the_memory():
    from dask_dane.pipeline.engine.run import bounded

    clock = iter([0.0, 30.0, 61.0])
    stuck = bounded.Stuck(clock=lambda: next(clock))  # not time.monotonic: see Stuck

    stuck.check(_PausedCluster(True), [_Pending()])  # paused since 0 s
    stuck.check(_PausedCluster(True), [_Pending()])  # 30 s: still waiting

    with pytest.raises(ValueError, match=r"^every worker has been paused .* for 61 s .* 512 MiB"):
        stuck.check(_PausedCluster(True), [_Pending()])


def test_a_worker_that_resumes_starts_the_pause_clock_again():
    from dask_dane.pipeline.engine.run import bounded

    clock = iter([0.0, 50.0, 100.0, 150.0])
    stuck = bounded.Stuck(clock=lambda: next(clock))  # not time.monotonic: see Stuck

    for paused in (True, False, True, True):  # paused 0-50 s, resumed, paused again at 100 s
        stuck.check(_PausedCluster(paused), [_Pending()])

    assert stuck.paused_since == 100.0
