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

from typing import Any


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
