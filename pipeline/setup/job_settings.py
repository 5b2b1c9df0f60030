"""The cluster section's batch-queue settings: `--cluster slurm|pbs|lsf|sge` and the job
resources (run/jobqueue.py starts the cluster from them).

A job's resources come from Dask's own jobqueue config (`jobqueue.slurm.cores`, ...; a
jobqueue.yaml or DASK_JOBQUEUE__SLURM__CORES), as dask-jobqueue users write it; the `job_*`
settings override it for one run. Declared apart from settings.py, which ClusterSettings
joins them into, beside the address a running scheduler's file holds (`--scheduler-file`, as
HPC sites start one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..algorithms.parts.checks import at_least_one, one_of, optional, positive
from ..algorithms.parts.hyperparameters import declare
from ..algorithms.parts.setting_error import SettingError, setting

# `--cluster` values: a cluster on this machine, or one of dask-jobqueue's, by its config name.
LOCAL = "local"
CLUSTERS = (LOCAL, "slurm", "pbs", "lsf", "sge")
# What a job-queue cluster needs and a local one would ignore (checked both ways).
JOB_FIELDS = ("jobs", "job_cores", "job_memory", "job_walltime", "job_directives")


def check_bytes(name: str, text: str) -> None:
    """A size as Dask reads one ("2GiB", "500MB", "1e9"), above 0; SettingError otherwise."""
    from dask.utils import parse_bytes  # dask, not distributed: a light import

    try:
        size = parse_bytes(text)
    except (ValueError, TypeError):
        size = 0
    if size <= 0:
        raise SettingError(f"{setting(name)} {text!r} is not a size; give one like 2GiB or 500MB")


def scheduler_file_address(path: str) -> str:
    """The address in a Dask scheduler file; SettingError naming the problem if there is none."""
    named = setting("scheduler_file", path)
    start = f"start one with `dask scheduler --scheduler-file {path}` or check the path"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SettingError(f"{named} does not exist; {start}") from None
    except (OSError, ValueError) as err:
        why = f"cannot be read as JSON ({type(err).__name__})"
        raise SettingError(f"{named} {why}; {start}") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        raise SettingError(f"{named} names no scheduler address; {start}")
    return address


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    cluster: str = declare(
        LOCAL,
        one_of(*CLUSTERS),
        help="local (started on this machine) | slurm | pbs | lsf | sge (a dask-jobqueue "
        "cluster of --jobs batch jobs, one worker each, sized by Dask's jobqueue config; "
        "needs dask-dane[hpc]).",
    )
    jobs: int | None = declare(
        None, help="--cluster slurm|pbs|lsf|sge: batch jobs, one worker each (default: --workers)."
    )
    job_cores: int | None = declare(
        None,
        help="Cores a job asks for, its worker's threads (default: jobqueue.CLUSTER.cores).",
    )
    job_memory: str | None = declare(
        None,
        help="Memory a job asks for, its worker's memory limit, e.g. 4GiB (default: "
        "jobqueue.CLUSTER.memory).",
    )
    job_walltime: str | None = declare(
        None, help="Wall time a job asks for, e.g. 02:00:00 (default: jobqueue.CLUSTER.walltime)."
    )
    # Added to the config's job-extra-directives; ';' since a directive may hold spaces
    # (PBS: `-l select=1:ngpus=1`) or commas (SLURM: `--gres=gpu:a100:1,shard:1`).
    job_directives: str | None = declare(
        None,
        help="Extra job-script directives, ';' between them, e.g. '--gres=gpu:1' (SLURM: each "
        "an #SBATCH line), after jobqueue.CLUSTER.job-extra-directives.",
    )
    queue_timeout: float = declare(
        600.0,
        positive,
        help="Seconds to wait for the queue to start every job's worker before round 1; then "
        "stop, naming the jobs' queue state (exit 4).",
    )

    def check_jobs(self, *, scheduler_named: bool) -> None:
        """SettingError for a job setting without a job queue, or a job queue beside a
        scheduler that is already running."""
        if self.cluster == LOCAL:
            given = [name for name in JOB_FIELDS if getattr(self, name) is not None]
            if given:
                raise SettingError(
                    f"{setting(given[0])} sizes the batch jobs of a job-queue cluster; pass "
                    f"{setting('cluster', 'slurm')} (or pbs, lsf, sge) or drop it"
                )
            return
        if scheduler_named:
            raise SettingError(
                f"{setting('cluster', self.cluster)} starts a cluster, and {setting('scheduler')}"
                f" or {setting('scheduler_file')} names a running one; pass one of them"
            )
        optional(at_least_one)("jobs", self.jobs)
        optional(at_least_one)("job_cores", self.job_cores)
        optional(check_bytes)("job_memory", self.job_memory)

    def job_directive_list(self) -> list[str]:
        """--job-directives as a list, empty parts dropped."""
        return [part.strip() for part in (self.job_directives or "").split(";") if part.strip()]
