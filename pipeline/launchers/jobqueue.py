"""A dask-jobqueue cluster for `--cluster slurm|pbs|lsf|sge` (cluster.py starts it here).

The scheduler runs in the driver's process; each worker is one batch job (one process, the
job's cores as its threads), submitted by dask-jobqueue from Dask's jobqueue config and the
run's `--job-*` overrides. The driver waits up to `--queue-timeout` for every job's worker
before round 1; a queue that has not started them, or a job that ended without its worker,
is one line naming the jobs' state (QueueStalled, exit 4); a job the queue refused, one
line with what its submit command said (exit 2). Closing the cluster cancels its jobs
(scancel, qdel, bkill), which make_client does at the end of a run, on an error and on
Ctrl-C alike. dask-jobqueue is the `hpc` extra, imported only when a run asks for one.
"""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ..algorithms.parts.setting_error import SettingError, setting
from ..engine.run.bounded import cluster_identity
from ..setup.job_settings import LOCAL
from ..setup.settings import ClusterSettings
from .errors import QueueStalled

if TYPE_CHECKING:
    from distributed import Client

# How often the wait for the jobs looks at the queue: a job that ended without its worker
# (a broken environment on its node) stops the run then, not after --queue-timeout.
POLL_S = 2.0

INSTALL = "pip install 'dask-dane[hpc]'"
# --cluster NAME: dask-jobqueue's class, and the command that submits a job.
CLUSTER_CLASSES = {
    "slurm": ("SLURMCluster", "sbatch"),
    "pbs": ("PBSCluster", "qsub"),
    "lsf": ("LSFCluster", "bsub"),
    "sge": ("SGECluster", "qsub"),
}
# The allocator variables of the workers cluster.py starts (CLUSTER_CONFIG says why), set in
# the job script: a nanny's own defaults give way to the environment's.
PROLOGUE = [
    f"export MALLOC_TRIM_THRESHOLD_={64 * 2**20}",
    f"export MALLOC_MMAP_THRESHOLD_={32 * 2**20}",
]


def uses_job_queue(config: ClusterSettings) -> bool:
    """True for --cluster slurm|pbs|lsf|sge."""
    return config.cluster != LOCAL


def check_job_queue(config: ClusterSettings) -> None:
    """SettingError, before anything is written, where the cluster asked for cannot start
    here: dask-jobqueue missing (one line with the install command), no submit command, or
    a job's cores or memory in neither the flags nor Dask's jobqueue config."""
    if not uses_job_queue(config):
        return
    named = setting("cluster", config.cluster)
    if importlib.util.find_spec("dask_jobqueue") is None:
        raise SettingError(f"{named} needs dask-jobqueue: {INSTALL}")
    submit = CLUSTER_CLASSES[config.cluster][1]
    if shutil.which(submit) is None:
        raise SettingError(
            f"{named} submits jobs with `{submit}`, which is not on PATH here; run on a "
            "machine that submits jobs (a login node)"
        )
    _import_dask_jobqueue()  # which adds its defaults (jobqueue.yaml) to Dask's config
    queue = config.cluster
    given = {"cores": config.job_cores, "memory": config.job_memory}
    if any(given[key] is None and _own(config, key) is None for key in given):
        raise SettingError(
            f"{named} needs a job's cores and memory: pass {setting('job_cores')} and "
            f"{setting('job_memory')}, or set jobqueue.{queue}.cores and .memory in Dask's "
            f"config (DASK_JOBQUEUE__{queue.upper()}__CORES=4)"
        )


def start_job_cluster(config: ClusterSettings) -> Any:
    """The job-queue cluster of `config`, its jobs submitted (cluster.scale(jobs=N))."""
    dask_jobqueue = _import_dask_jobqueue()
    class_name, _ = CLUSTER_CLASSES[config.cluster]
    overrides = {
        "cores": config.job_cores,
        "memory": config.job_memory,
        "walltime": config.job_walltime,
    }
    options: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    # One worker per job, whatever the config's `processes`: a job is the unit that gets a
    # GPU (--gres=gpu:1), and the pipeline places shards per worker.
    options["processes"] = 1
    options["job_extra_directives"] = [
        *(_own(config, "job-extra-directives") or []),
        *config.job_directive_list(),
    ]
    options["job_script_prologue"] = [*(_own(config, "job-script-prologue") or []), *PROLOGUE]
    # The dashboard where --dashboard-address says, unless the jobqueue config places it.
    options["scheduler_options"] = {
        "dashboard_address": config.dashboard_address,
        **(_own(config, "scheduler-options") or {}),
    }
    cluster_class = getattr(dask_jobqueue, class_name)
    options["job_cls"] = _recording(cluster_class.job_cls)
    cluster = cluster_class(**options)  # cores, memory: check_job_queue
    cluster.scale(jobs=job_count(config))
    return cluster


def _own(config: ClusterSettings, key: str) -> Any:
    """The jobqueue config's `key` for --cluster, as spelt there (- or _), or None."""
    import dask

    return dask.config.get(f"jobqueue.{config.cluster}.{key}", default=None)


def _recording(job_class: type) -> type:
    """`job_class` keeping what the submit command said when it refused a job (`refused`)
    instead of raising it: raised in the cluster's event loop it would print a traceback, and
    the wait for the job would only time out."""
    from distributed.deploy.spec import ProcessInterface

    class Recorded(job_class):  # type: ignore[valid-type, misc]
        refused: ClassVar[list[str]] = []

        async def start(self) -> None:
            try:
                await super().start()
            except RuntimeError as err:  # dask-jobqueue's: the command, its status, stderr
                self.refused.append(str(err))
                # Started as the cluster expects of every job; with no job id, closing it
                # cancels nothing.
                await ProcessInterface.start(self)

    return Recorded  # a class, so a list, per cluster


def _import_dask_jobqueue() -> ModuleType:
    """dask_jobqueue, imported with the SIGINT handler left as it was, its defaults in Dask's
    config. Its runner module sets a handler that calls sys.exit() when imported, so Ctrl-C
    would end a run with status 0. Its defaults are added once, at its first import, and a
    `dask.config.set` block open then removes them on exit: a second run in the same
    process (a notebook) would find no `jobqueue.slurm.python`. Re-adding them keeps every
    value already set."""
    handler = signal.getsignal(signal.SIGINT)
    import dask_jobqueue
    from dask_jobqueue.config import reconfigure

    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)
    reconfigure()
    return dask_jobqueue


def job_count(config: ClusterSettings) -> int:
    """--jobs, or --workers where it is not given."""
    return config.jobs if config.jobs is not None else config.workers


def wait_for_jobs(client: Client, cluster: Any, config: ClusterSettings) -> None:
    """Return once every job's worker has joined. ValueError where the queue refused a job;
    QueueStalled where a job ended without its worker, or after --queue-timeout."""
    wanted = job_count(config)
    deadline = time.monotonic() + config.queue_timeout
    while True:
        left = deadline - time.monotonic()
        try:
            client.wait_for_workers(wanted, timeout=max(0.1, min(POLL_S, left)))
            return
        except TimeoutError:
            pass
        _refuse_refused(cluster, config)
        joined = len(cluster_identity(client)["workers"])
        states = job_states(cluster, config)
        ended = [job for job, state in states.items() if state is None]
        line = _queue_line(states, cluster)
        if ended:  # no job replaces it: the wait could only time out
            raise QueueStalled(
                f"{joined} of {wanted} workers joined, and {len(ended)} of their "
                f"{config.cluster} jobs ended without one ({line}); the job's log says why "
                f"(in jobqueue.{config.cluster}.log-directory, else where the run started)"
            )
        if time.monotonic() >= deadline:
            raise QueueStalled(
                f"the {config.cluster} queue started {joined} of {wanted} workers' jobs within "
                f"--queue-timeout {config.queue_timeout:g} s ({line}); check the partition, "
                "the job's resources and your allocation, or wait longer with a larger "
                "--queue-timeout"
            )


def _refuse_refused(cluster: Any, config: ClusterSettings) -> None:
    """ValueError (exit 2) naming what the submit command said where it refused a job."""
    refused = getattr(cluster.job_cls, "refused", None)
    if not refused:
        return
    said = refused[0].partition("stderr:")[2].strip() or refused[0].strip()
    submit = CLUSTER_CLASSES[config.cluster][1]
    raise ValueError(
        f"`{submit}` refused a worker's job: {'; '.join(said.splitlines())}; check "
        f"--job-directives, the other --job-* flags and Dask's jobqueue.{config.cluster} config"
    )


def job_states(cluster: Any, config: ClusterSettings) -> dict[str, str | None]:
    """Each submitted job's state and reason as `squeue` gives them ("PENDING (PartitionDown)"),
    None for a job no longer in the queue; empty for the queues other than SLURM (not run
    here: no guess at their commands' output)."""
    ids = [job.job_id for job in cluster.workers.values() if getattr(job, "job_id", None)]
    if not ids or config.cluster != "slurm":
        return {}
    done = subprocess.run(
        ["squeue", "--noheader", "--format=%i %T (%r)", f"--jobs={','.join(ids)}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    listed = dict(line.strip().split(" ", 1) for line in done.stdout.splitlines() if line.strip())
    return {job: listed.get(job) for job in ids}


def _queue_line(states: dict[str, str | None], cluster: Any) -> str:
    """The jobs and their states in one line."""
    ids = [job.job_id for job in cluster.workers.values() if getattr(job, "job_id", None)]
    if not ids:
        return "no job was submitted"
    if not states:
        return f"jobs {', '.join(ids)}"
    gone = "not in the queue (ended: see its job log)"
    return "jobs " + "; ".join(f"{job} {state or gone}" for job, state in states.items())
