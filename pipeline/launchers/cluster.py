"""make_client(): the Dask cluster a run uses.

- `--scheduler ADDRESS`: connect to a running cluster (jobqueue, Kubernetes, SSH, ...);
- `--cluster slurm|pbs|lsf|sge`: a dask-jobqueue cluster, one worker per batch job (jobqueue.py);
- GPUs present and the `gpu` extra installed: dask-cuda's LocalCUDACluster, one worker per GPU;
- otherwise a LocalCluster of `--workers` processes with `--threads-per-worker` threads.
Local clusters (scheduler, nannies, workers, dashboard) listen on 127.0.0.1 unless the user
asks for another `--host` / `--dashboard-address`; a job queue's scheduler where its jobqueue
config says (its workers run on other nodes). A remote scheduler is reached with TLS when
`--tls-ca-file/--tls-cert/--tls-key` or Dask's `distributed.comm.tls` config say so.

A cluster that fails to start because of a missing main guard is said in one line
(errors.py).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

# Importing the dashboard module adds /dane to the dashboards started here.
from ..observe import dashboard  # noqa: F401
from ..setup.settings import ClusterSettings, scheduler_file_address
from .cluster_checks import LOG_FORMAT, checked_start, route_cluster_logs
from .errors import reporting_unguarded_main
from .jobqueue import start_job_cluster, uses_job_queue, wait_for_jobs

if TYPE_CHECKING:
    from distributed import Worker


class TorchThreads(WorkerPlugin):
    """Limit torch on each worker to the worker's own threads (no oversubscription)."""

    name = "dask-dane-torch-threads"

    def setup(self, worker: Worker) -> None:
        import torch

        torch.set_num_threads(max(1, worker.state.nthreads))
        # LocalCUDACluster gives each worker one GPU (CUDA_VISIBLE_DEVICES); workers of any
        # other cluster that see several GPUs share them out by worker name, round robin.
        if torch.cuda.is_available() and torch.cuda.device_count() > 1:
            name = worker.name
            index = name if isinstance(name, int) else sum(map(ord, str(name)))
            torch.cuda.set_device(index % torch.cuda.device_count())


def gpus_available() -> bool:
    """True when torch sees a GPU and dask-cuda imports (lazily: it needs CUDA to import).

    A dask-cuda that is installed but does not import (a version that does not match the
    installed distributed, say) is reported and skipped: the workers still use the GPUs,
    started as a plain LocalCluster.
    """
    import torch

    if not torch.cuda.is_available() or importlib.util.find_spec("dask_cuda") is None:
        return False
    if os.environ.get("DANE_NO_DASK_CUDA"):  # use LocalCluster workers on the GPUs instead
        return False
    try:
        import dask_cuda  # noqa: F401
    except Exception as err:  # any import failure: fall back, never stop the run
        logging.getLogger(__name__).warning(
            "dask-cuda does not import (%s); using LocalCluster", err
        )
        return False
    return True


# For the clusters started here:
# - Work stealing moves a queued task to an idle worker: for a shard's task that means
#   fetching the shard over the network, exactly what pinning avoids (and the transfers
#   would no longer be the ones counted).
# - glibc's allocator: Dask's MALLOC_TRIM_THRESHOLD_=65536 also freezes the mmap threshold
#   at 128 KiB, so every activation tensor is mmap'd, faulted in and unmapped again: lenet's
#   local work ran 1.5x slower in a worker than in one process (0.92 s against 0.60 s a
#   task, `dane bench scaling`). Freed memory up to 64 MiB stays with the process.
# - Spilling: held splits are copies of the store that the next task reads again (spilled
#   validation rows went to disk and back 50 MiB at a time, every few ms); auto streams.
# Users of their own cluster set the same in its Dask config.
CLUSTER_CONFIG = {
    "distributed.scheduler.work-stealing": False,
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": 64 * 2**20,
    "distributed.nanny.pre-spawn-environ.MALLOC_MMAP_THRESHOLD_": 32 * 2**20,
}


def _start_cluster(config: ClusterSettings, *, queued: bool):  # type: ignore[no-untyped-def]
    """`queued`: a dask-jobqueue cluster of batch jobs (jobqueue.py), else a local one."""
    import dask

    # A worker re-running an unguarded script leaves at reporting_unguarded_main's start.
    with dask.config.set(CLUSTER_CONFIG), reporting_unguarded_main():  # read once, at start
        start = start_job_cluster if queued else _new_cluster
        return checked_start(config, lambda: start(config))  # --device, the port


@contextmanager
def _workers_deaf_to_ctrl_c() -> Iterator[None]:
    """SIGINT blocked in this thread while a local cluster starts. A terminal's Ctrl-C goes
    to every process of its foreground job, the worker processes too, and each printed a
    35-line KeyboardInterrupt traceback over the driver's one line that says how to resume.
    The cluster's IO-loop thread, created now, inherits the mask, as do the threads it starts
    the worker processes from and, across fork and exec, the workers (Python leaves a blocked
    signal blocked): in them SIGINT stays pending, and the driver alone stops and closes the
    cluster. A Ctrl-C during the start reaches the driver once the mask is restored."""
    from multiprocessing import resource_tracker

    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks, nor this Ctrl-C
        yield
        return
    # Started here first: starting it unblocks SIGINT in the thread that starts it (bpo-33613),
    # which would be the IO loop's, and so every worker's.
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _new_cluster(config: ClusterSettings):  # type: ignore[no-untyped-def]
    with _workers_deaf_to_ctrl_c():
        return _local_cluster(config)


def _local_cluster(config: ClusterSettings):  # type: ignore[no-untyped-def]
    address = config.dashboard_address
    common = dict(host=config.host, dashboard_address=address, silence_logs=logging.ERROR)
    limit = {} if config.memory_limit is None else {"memory_limit": config.memory_limit}
    # A started cluster is LocalCUDACluster (one worker per GPU) unless --device cpu.
    if config.device != "cpu" and gpus_available():
        import torch
        from dask_cuda import LocalCUDACluster

        # One worker per GPU: all of them with --device auto, --workers of them with cuda.
        count = torch.cuda.device_count()
        workers = min(config.workers, count) if config.device == "cuda" else count
        return LocalCUDACluster(
            n_workers=workers, threads_per_worker=config.threads_per_worker, **common, **limit
        )
    sizes = dict(n_workers=config.workers, threads_per_worker=config.threads_per_worker)
    return LocalCluster(processes=True, **sizes, **common, **limit)


class WorkerLogsToFile(WorkerPlugin):
    """The log records of a started cluster's worker processes go to a file (the run's
    cluster.log), not to the terminal they inherited: the terminal shows our progress bar
    and one-line messages; the records stay where a user debugging a run looks."""

    name = "dask-dane-worker-logs"

    def __init__(self, path: str) -> None:
        self.path = path

    def setup(self, worker: Worker) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.path, delay=True)  # appends, as the driver does
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        route_cluster_logs(handler)  # for the worker's whole life: nothing to restore


@contextmanager
def make_client(config: ClusterSettings, *, worker_log: Path | None = None) -> Iterator[Client]:
    """A connected client; a cluster started here is closed on exit (a job queue's jobs too).

    `config` is the run's cluster section (a RunConfig is one). `worker_log`: where the
    workers of a local cluster started here log (a running scheduler's are the user's, and
    a job's worker writes to its job's output file)."""
    address = config.scheduler_file and scheduler_file_address(config.scheduler_file)
    address = address or config.scheduler
    queued = not address and uses_job_queue(config)
    cluster = None if address else _start_cluster(config, queued=queued)
    client = _connect(config, address) if address else Client(cluster)
    # The driver reports a lost scheduler itself, in one line (loop.py): the client's own
    # reconnection tracebacks would only bury it.
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    try:
        client.register_plugin(TorchThreads())
        if queued:
            wait_for_jobs(client, cluster, config)  # every job's worker, or QueueStalled
        elif cluster is not None and worker_log is not None:
            client.register_plugin(WorkerLogsToFile(str(worker_log.absolute())))
        client.wait_for_workers(1, timeout=config.timeout)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        client_log.setLevel(level)


def _connect(config: ClusterSettings, address: str) -> Client:
    security = _security(config)
    if address.startswith("tls://") and not security.get_connection_args("client")["ssl_context"]:
        raise ValueError(
            f"the scheduler {address} speaks TLS and no certificates are set; pass "
            "--tls-ca-file, --tls-cert and --tls-key (or set distributed.comm.tls.* in the "
            "Dask config)"
        )
    try:
        return Client(address, timeout=config.timeout, security=security)
    except (OSError, TimeoutError) as err:
        # A scheduler that stopped leaves its file behind: say where the address came from.
        source = f" (from --scheduler-file {config.scheduler_file}: stale?)"
        source = source if config.scheduler_file else ""
        raise ValueError(
            f"no Dask scheduler answered at {address}{source} within {config.timeout:g} s "
            f"({type(err).__name__}); check the address or start one with `dask scheduler`"
        ) from None


def _security(config: ClusterSettings):  # type: ignore[no-untyped-def]
    """TLS from --tls-* when given; otherwise Dask's config (distributed.comm.tls.*) applies."""
    from distributed.security import Security

    if not (config.tls_ca_file or config.tls_cert):
        return Security()  # reads the Dask config, as a plain Client(address) would
    return Security(
        tls_ca_file=config.tls_ca_file,
        tls_client_cert=config.tls_cert,
        tls_client_key=config.tls_key,
        require_encryption=True,
    )
