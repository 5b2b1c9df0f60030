"""The driver's requests to its cluster, bounded: none hangs on a frozen scheduler, and none
waits on a task Dask will never run again.

- the requests (`wait_for`, `check_scheduler`, `bounded`, `scheduler_checked`, and
  `publish_round`, the round's row sent as a Dask event): ClusterLost past `--timeout`;
  `cluster_identity`, the workers as the scheduler lists them now, not as the client cached;
- tasks Dask will never run again, found, so that the round fails and is rerun, not waited
  on. When every worker of a cluster dies at once (a shard too big for its workers' memory
  makes each nanny restart its worker), Dask puts the tasks it must recompute in its
  "no-worker" state. A task pinned to a worker with `allow_other_workers` (the shard loads
  and the rounds' tasks) then stays there when new workers join: they do not match the pin,
  and the scheduler does not decide again. The driver's wait (`wait_for`) asks the
  scheduler every few seconds whether a pending future depends on such a task; if so, the
  round fails as one whose workers were lost (an OSError), and the driver runs it again from
  its own state, or stops in one line after its attempts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from distributed import Client

from .errors import ClusterLost

# The topic of the rounds' events; observe/dashboard.py reads the same (it imports nothing
# of the package: it runs in a scheduler that may lack torch), and a test holds them equal.
EVENT_TOPIC = "dane"

# How long every worker may stay paused (Dask's memory manager stops a worker from starting
# tasks above 80% of its memory limit) while the run waits, before the run stops: a paused
# worker whose own memory does not fall never resumes, and the run would wait for good.
PAUSED_GIVE_UP_S = 60.0


def cluster_identity(client: Any, timeout: float | None = None) -> dict[str, Any]:
    """The scheduler's identity with every worker, asked now (TimeoutError past `timeout`).

    Not Client.scheduler_info(): it returns the client's cached identity, which the client's
    own periodic refresh (every 2 s, workers left out) may overwrite between the fresh fetch
    and the return, so that a cluster of running workers reads as one without any (seen in a
    test run: 'the cluster has no workers to hold the shards'; 518 of 2,000 calls with the
    refresh every 1 ms, distributed 2026.7.1)."""
    return client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=timeout)


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


def _paused(dask_scheduler: Any) -> dict[str, int]:
    """Memory limit of each paused worker, if every worker is paused; runs on the scheduler."""
    workers = dask_scheduler.workers.values()
    paused = {ws.address: ws.memory_limit for ws in workers if ws.status.name == "paused"}
    return paused if workers and len(paused) == len(workers) else {}


class Stuck:
    """What the driver's wait checks every few seconds: stranded tasks (an OSError naming them
    if a pending future depends on one), and every worker paused for PAUSED_GIVE_UP_S (a
    ValueError in one line: more memory is the fix, so the round is not rerun)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # a test's own clock: patching time.monotonic stops event loops
        self.paused_since: float | None = None

    def check(self, client: Any, futures: list[Any]) -> None:
        keys = [future.key for future in futures if not future.done()]
        found = client.run_on_scheduler(stranded, keys=keys) if keys else []
        if found:  # the round fails as one whose workers were lost
            raise OSError(
                f"tasks wait for workers that are gone ({', '.join(found[:3])}): every worker "
                "was lost at once (their memory limits exceeded?)"
            )
        paused = client.run_on_scheduler(_paused)
        now = self.clock()
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


# The driver's requests to the cluster, none of which may wait forever: a frozen scheduler
# (stopped, or its event loop blocked) keeps its sockets open, so no connection ever fails.
# Every wait here has a bound (--timeout) or checks that the scheduler still answers.


def wait_for(client: Any, futures: list[Any], timeout: float) -> None:
    """Wait for futures, however long they take, while the scheduler answers.

    Every few seconds the scheduler is asked for its identity; if the client has lost it, or
    it does not answer within --timeout, ClusterLost (a round may take any time; a silent
    scheduler may not); and whether the tasks are stranded or every worker paused for good
    (Stuck, above). Done-callbacks wake the driver the moment the last future finishes
    (polling would add its interval to every round); `distributed.wait(timeout=...)` leaves
    a reference cycle per timeout that holds the round's futures until a collection.
    """
    pending = [future for future in futures if not future.done()]
    if not pending:
        return
    all_done = threading.Event()
    remaining = [len(pending)]
    lock = threading.Lock()

    def one_done(_future: Any) -> None:
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                all_done.set()

    for future in pending:
        future.add_done_callback(one_done)
    poll, stuck = min(5.0, timeout), Stuck()
    while not all_done.wait(poll):
        check_scheduler(client, timeout)
        stuck.check(client, pending)  # workers lost or paused for good: Dask would wait


def check_scheduler(client: Any, timeout: float) -> None:
    """ClusterLost unless the scheduler answers within --timeout."""
    reason = None
    if client.status != "running":
        reason = f"the client lost the scheduler (client status {client.status})"
    else:
        try:
            client.sync(client.scheduler.identity, callback_timeout=timeout)
        except (OSError, TimeoutError) as err:
            reason = f"the scheduler did not answer within {timeout:g} s ({type(err).__name__})"
    if reason:
        raise ClusterLost(reason)


def bounded(client: Any, timeout: float, method: Callable, *args: Any, **kwargs: Any) -> Any:
    """client.method(*args, **kwargs), given at most --timeout seconds to answer.

    A frozen scheduler (stopped, or its event loop blocked) keeps its sockets open, so no
    connection ever fails and a plain scatter or gather waits for it forever. The
    TimeoutError is an OSError: callers check the scheduler and raise ClusterLost.
    """

    async def run() -> Any:
        return await method(*args, asynchronous=True, **kwargs)

    return client.sync(run, callback_timeout=timeout)


@contextmanager
def scheduler_checked(client: Any, timeout: float) -> Iterator[None]:
    """Around the driver's requests: an OSError (a scheduler killed mid-request closes the
    comm, CommClosedError) is ClusterLost where the scheduler is gone, else raised as is."""
    try:
        yield
    except OSError:
        check_scheduler(client, timeout)
        raise


def publish_round(client: Client, timeout: float, run_dir: Path, token: str, row: dict) -> None:
    """The round's metrics row as a Dask event, for any client, the scheduler and its pages.

    Tagged with the run's token and directory, so that runs sharing a scheduler are told
    apart. Bounded like every request of the driver's (a frozen scheduler raises OSError).
    """
    event = {"run": token, "run_dir": str(run_dir), **row}
    with scheduler_checked(client, timeout):
        client.sync(
            client.scheduler.log_event, topic=EVENT_TOPIC, msg=event, callback_timeout=timeout
        )
