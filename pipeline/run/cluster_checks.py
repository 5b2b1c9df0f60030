"""A cluster the driver uses, watched: checks at its start, its logs, tasks stranded on it.

The driver's own words for what Dask would say at length or not at all (cluster.py calls it):
- before a cluster starts here: `--device cuda` needs a GPU that torch sees, refused in one
  line rather than by every worker after the cluster's start (28 s of it); after it starts:
  a dashboard port that was taken is said in one line, instead of Dask's 4-line warning;
- its logs: which loggers are the cluster's, and how their records go to one handler. Used on
  both sides: `dane train` sends the in-process scheduler's records to RUN_DIR/cluster.log
  (console.quiet_cluster_logs), and each worker of a cluster started here sends its own there
  too (cluster.WorkerLogsToFile). One list, so the two never disagree;
- tasks Dask will never run again, found, so that the round fails and is rerun, not waited
  on. When every worker of a cluster dies at once (a shard too big for its workers' memory
  makes each nanny restart its worker), Dask puts the tasks it must recompute in its
  "no-worker" state. A task pinned to a worker with `allow_other_workers` (the shard loads
  and the rounds' tasks) then stays there when new workers join: they do not match the pin,
  and the scheduler does not decide again. The driver's wait (cluster.wait_for) asks the
  scheduler every few seconds whether a pending future depends on such a task; if so, the
  round fails as one whose workers were lost (an OSError), and the driver runs it again from
  its own state, or stops in one line after its attempts;
- the driver's requests that must not hang on a frozen scheduler (`wait_for`,
  `check_scheduler`, `bounded`, `scheduler_checked`: ClusterLost past `--timeout`).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from ..algorithms.parts.setting_error import SettingError, setting
from ..setup.settings import ClusterSettings
from .errors import ClusterLost

# distributed/node.py warns so when the dashboard's port is taken (then it takes another).
PORT_TAKEN = r"Port \d+ is already in use"


def checked_start(config: ClusterSettings, start: Callable[[], Any]) -> Any:
    """The cluster `start()` returns, refused before it starts where --device cuda finds no
    GPU, and with a taken dashboard port said in one line."""
    refuse_missing_gpu(config)
    with warnings.catch_warnings():  # Dask's warning, said in one line below instead
        warnings.filterwarnings("ignore", message=PORT_TAKEN, category=UserWarning)
        cluster = start()
    note_dashboard_port(config.dashboard_address, cluster.dashboard_link)
    return cluster


def refuse_missing_gpu(config: ClusterSettings) -> None:
    """SettingError when --device cuda asks a cluster started here for a GPU torch cannot see.

    Only for a cluster started on this machine: the workers of a --scheduler cluster run
    elsewhere, and may have the GPUs the driver lacks.
    """
    if config.device != "cuda" or config.scheduler or config.scheduler_file:
        return
    if config.cluster != "local":  # its workers run in batch jobs, on the nodes' GPUs
        return
    import torch

    if not torch.cuda.is_available():
        raise SettingError(
            f"{setting('device', 'cuda')}, but torch sees no GPU on this machine "
            f"(torch.cuda.is_available() is False); use {setting('device', 'auto')} or "
            f"{setting('device', 'cpu')}, or pass {setting('scheduler')} of a cluster whose "
            "workers have GPUs"
        )


def note_dashboard_port(asked: str, link: str) -> str | None:
    """One line, logged, when the dashboard is not on the port `asked` (host:port) for; the
    line, or None where it is (or where any port would do)."""
    wanted = asked.rpartition(":")[2]
    try:
        port = urlsplit(link).port
    except ValueError:  # no dashboard (bokeh missing): nothing to say
        return None
    if not wanted.isdigit() or int(wanted) == 0 or port is None or port == int(wanted):
        return None
    line = f"dashboard port {wanted} is taken; the dashboard is at {link}"
    logging.getLogger(__name__).warning(line)
    return line


# The cluster's logs.

# Dask's own records, and Tornado's and Bokeh's (the dashboard's web server): a browser
# closing a dashboard page made Bokeh print a 30-line traceback between the progress bar's
# updates.
CLUSTER_LOGGERS = ("distributed", "tornado", "bokeh")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"

# A logger's handlers and its propagate flag, as they were before routing.
Saved = dict[str, tuple[list[logging.Handler], bool]]


def route_cluster_logs(handler: logging.Handler) -> Saved:
    """Give the cluster's top loggers `handler` alone (not propagated to the root's terminal
    handler); return what every logger touched had, for `restore_logs`.

    Loggers below them that Dask or Tornado gave handlers of their own pass their records
    up instead, to the one handler here.
    """
    below = [
        name
        for name, logger in list(logging.root.manager.loggerDict.items())
        if name.startswith(tuple(f"{top}." for top in CLUSTER_LOGGERS))
        and isinstance(logger, logging.Logger)  # not a PlaceHolder for a dotted parent
    ]
    saved: Saved = {}
    for name in [*CLUSTER_LOGGERS, *below]:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate)
        top = name in CLUSTER_LOGGERS
        logger.handlers, logger.propagate = ([handler], False) if top else ([], True)
    return saved


def restore_logs(saved: Saved) -> None:
    """Put back the handlers and propagate flags `route_cluster_logs` replaced."""
    for name, (handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = handlers, propagate


# Stranded tasks and paused workers, checked while the driver waits.

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
