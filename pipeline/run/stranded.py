"""Tasks Dask will never run again, found, so that the round fails and is rerun, not waited on.

When every worker of a cluster dies at once (a shard too big for its workers' memory makes
each nanny restart its worker), Dask puts the tasks it must recompute in its "no-worker"
state. A task pinned to a worker with `allow_other_workers` (the shard loads and the rounds'
tasks) then stays there when new workers join: they do not match the pin, and the scheduler
does not decide again. The driver's wait (cluster.wait_for) asks the scheduler every few
seconds whether a pending future depends on such a task; if so, the round fails as one whose
workers were lost (an OSError), and the driver runs it again from its own state, or stops in
one line after its attempts.
"""

from __future__ import annotations

import time
from typing import Any

# How long every worker may stay paused (Dask's memory manager stops a worker from starting
# tasks above 80% of its memory limit) while the run waits, before the run stops: a paused
# worker whose own memory does not fall never resumes, and the run would wait for good.
PAUSED_GIVE_UP_S = 60.0


def stranded(dask_scheduler: Any, keys: list[str]) -> list[str]:
    """Keys, among `keys` and what they depend on, waiting for workers that are gone while
    other workers are there to run them; runs on the scheduler."""
    workers = set(dask_scheduler.workers)
    if not workers:
        return []  # no worker at all: the cluster may still bring them back
    found, seen = [], set()
    stack = [dask_scheduler.tasks.get(key) for key in keys]
    while stack:
        task = stack.pop()
        if task is None or task.key in seen or task.state == "memory":
            continue
        seen.add(task.key)
        pinned = task.worker_restrictions or set()
        if task.state == "no-worker" and pinned and not pinned & workers:
            found.append(str(task.key))
        stack.extend(task.dependencies)
    return found


def check_stranded(client: Any, futures: list[Any]) -> None:
    """OSError naming the stranded tasks if a pending future depends on one."""
    keys = [future.key for future in futures if not future.done()]
    found = client.run_on_scheduler(stranded, keys=keys) if keys else []
    if found:
        raise OSError(
            f"tasks wait for workers that are gone ({', '.join(found[:3])}): every worker was "
            "lost at once (their memory limits exceeded?)"
        )


def _paused(dask_scheduler: Any) -> dict[str, int]:
    """Memory limit of each paused worker, if every worker is paused; runs on the scheduler."""
    workers = dask_scheduler.workers.values()
    paused = {ws.address: ws.memory_limit for ws in workers if ws.status.name == "paused"}
    return paused if workers and len(paused) == len(workers) else {}


class Stuck:
    """What the driver's wait checks every few seconds: stranded tasks (check_stranded), and
    every worker paused for PAUSED_GIVE_UP_S (a ValueError in one line: more memory is the
    fix, so the round is not rerun)."""

    def __init__(self) -> None:
        self.paused_since: float | None = None

    def check(self, client: Any, futures: list[Any]) -> None:
        check_stranded(client, futures)
        paused = client.run_on_scheduler(_paused)
        now = time.monotonic()
        if not paused or self.paused_since is None:
            self.paused_since = now if paused else None
        if paused and now - self.paused_since >= PAUSED_GIVE_UP_S:
            limit = min(paused.values()) / 2**20
            raise ValueError(
                f"every worker has been paused by Dask's memory manager for "
                f"{now - self.paused_since:.0f} s (its process above 80% of its {limit:.0f} "
                "MiB memory limit), so no task can run: give the workers more memory (a "
                "worker holds about 400 MiB of Python, Dask and torch before any data)"
            )
