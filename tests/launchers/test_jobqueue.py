"""`--cluster slurm|pbs|lsf|sge` without a queue: the settings' checks, the options handed to
dask-jobqueue (flags over Dask's jobqueue config) and the job scripts they give, the queue
state in the stalled-queue line. No cluster, no job: tests/launchers/test_slurm.py runs a real
Slurm."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import dask
import pytest

from dask_dane.pipeline.algorithms.parts.setting_error import SettingError
from dask_dane.pipeline.engine.run.errors import ClusterLost
from dask_dane.pipeline.launchers import jobqueue
from dask_dane.pipeline.launchers.errors import QueueStalled
from dask_dane.pipeline.setup.config import RunConfig, in_flags

ROOT = Path(__file__).resolve().parents[2]
# Per queue: a directive in its own syntax, and the job-script line it must become.
DIRECTIVES = {
    "slurm": ("--gres=gpu:1", "#SBATCH --gres=gpu:1"),
    "pbs": ("-l select=1:ngpus=1", "#PBS -l select=1:ngpus=1"),
    "lsf": ('-gpu "num=1"', '#BSUB -gpu "num=1"'),
    "sge": ("-l gpu=1", "#$ -l gpu=1"),
}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(jobs=2), "--jobs sizes the batch jobs of a job-queue cluster; pass --cluster slurm"),
        (dict(job_directives="--gres=gpu:1"), "--job-directives sizes the batch jobs"),
        (dict(cluster="kubernetes"), "unknown --cluster 'kubernetes'"),
        (dict(cluster="slurm", scheduler="tcp://h:1"), "and --scheduler or --scheduler-file"),
        (dict(cluster="slurm", memory_limit="2GiB"), "a job's worker takes --job-memory"),
        (dict(cluster="slurm", job_memory="lots"), "--job-memory 'lots' is not a size"),
        (dict(cluster="slurm", jobs=0), "--jobs must be at least 1"),
        (dict(cluster="slurm", queue_timeout=0), "--queue-timeout must be a positive number"),
    ],
)
def test_job_settings_are_checked_and_refused_where_they_would_be_ignored(settings, message):
    with pytest.raises(SettingError) as caught:
        RunConfig(**settings).validate()
    assert message in str(caught.value)


def test_a_missing_extra_is_one_line_with_the_install_command(monkeypatch):
    real = jobqueue.importlib.util.find_spec
    monkeypatch.setattr(
        jobqueue.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "dask_jobqueue" else real(name, *a),
    )
    with pytest.raises(SettingError) as caught:
        jobqueue.check_job_queue(RunConfig(cluster="slurm").validate())
    assert in_flags(caught.value).splitlines() == [  # as `dane train` prints it
        "--cluster slurm needs dask-jobqueue: pip install 'dask-dane[hpc]'"
    ]


def test_no_submit_command_or_no_cores_is_refused_before_the_run(monkeypatch):
    config = RunConfig(cluster="pbs", job_cores=2, job_memory="2GiB").validate()
    monkeypatch.setattr(jobqueue.shutil, "which", lambda name: None)
    with pytest.raises(SettingError) as caught:
        jobqueue.check_job_queue(config)
    assert "submits jobs with `qsub`, which is not on PATH" in in_flags(caught.value)
    monkeypatch.setattr(jobqueue.shutil, "which", lambda name: f"/usr/bin/{name}")
    jobqueue.check_job_queue(config)  # cores and memory from the flags
    with dask.config.set({"jobqueue.pbs.cores": None, "jobqueue.pbs.memory": "4GiB"}):
        with pytest.raises(SettingError) as caught:
            jobqueue.check_job_queue(RunConfig(cluster="pbs").validate())
        assert "pass --job-cores and --job-memory, or set jobqueue.pbs.cores" in in_flags(
            caught.value
        )
        with dask.config.set({"jobqueue.pbs.cores": 4}):  # both from the config
            jobqueue.check_job_queue(RunConfig(cluster="pbs").validate())


def test_dask_jobqueue_is_imported_by_the_job_queue_module_alone_and_only_inside_it():
    tree = ast.parse((ROOT / "pipeline" / "launchers" / "jobqueue.py").read_text())
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = [alias.name for node in top for alias in node.names]
    assert not any(name.startswith("dask_jobqueue") for name in names)


@pytest.mark.parametrize("queue", list(DIRECTIVES))
def test_flags_and_the_jobqueue_config_meet_in_one_job_script(queue, monkeypatch):
    import dask_jobqueue

    made: dict = {}

    class_name = jobqueue.CLUSTER_CLASSES[queue][0]
    job_class = getattr(dask_jobqueue, class_name).job_cls

    class Recorder:  # stands for dask-jobqueue's cluster: records, starts nothing
        job_cls = job_class

        def __init__(self, **options):
            made["options"] = options

        def scale(self, *, jobs):
            made["jobs"] = jobs

    monkeypatch.setattr(dask_jobqueue, class_name, Recorder)
    directive, line = DIRECTIVES[queue]
    config = RunConfig(
        cluster=queue, jobs=3, job_cores=4, job_walltime="00:30:00", job_directives=directive
    ).validate()
    own = {
        f"jobqueue.{queue}.cores": 16,
        f"jobqueue.{queue}.memory": "6GiB",
        f"jobqueue.{queue}.job-extra-directives": ["-A proj"],
        f"jobqueue.{queue}.job-script-prologue": ["module load cuda"],
        f"jobqueue.{queue}.scheduler-options": {"interface": "ib0"},
    }
    with dask.config.set(own):
        jobqueue.start_job_cluster(config)
        options = made["options"]
        cluster_only = {"scheduler_options", "job_cls"}
        job_kwargs = {k: v for k, v in options.items() if k not in cluster_only}
        script = job_class(scheduler="tcp://10.0.0.1:8786", name="w", **job_kwargs).job_script()

    assert made["jobs"] == 3
    assert issubclass(options["job_cls"], job_class)  # which records a refused submission
    assert options["cores"] == 4 and "memory" not in options  # the flag, else the config's
    assert options["processes"] == 1  # one worker a job
    assert options["job_extra_directives"] == ["-A proj", directive]
    assert options["job_script_prologue"] == ["module load cuda", *jobqueue.PROLOGUE]
    assert options["scheduler_options"] == {
        "dashboard_address": "127.0.0.1:8787",
        "interface": "ib0",
    }
    assert line in script.splitlines()
    assert "export MALLOC_TRIM_THRESHOLD_=67108864" in script
    assert "--nthreads 4" in script and "--memory-limit 6.00GiB" in script


def test_the_stalled_queue_line_names_each_job_and_its_state(monkeypatch):
    jobs = {"a": SimpleNamespace(job_id="7"), "b": SimpleNamespace(job_id="8")}
    cluster = SimpleNamespace(workers=jobs)
    listing = subprocess.CompletedProcess([], 0, stdout="7 PENDING (PartitionDown)\n", stderr="")
    monkeypatch.setattr(jobqueue.subprocess, "run", lambda *a, **k: listing)
    states = jobqueue.job_states(cluster, RunConfig(cluster="slurm").validate())
    assert states == {"7": "PENDING (PartitionDown)", "8": None}
    assert jobqueue._queue_line(states, cluster) == (
        "jobs 7 PENDING (PartitionDown); 8 not in the queue (ended: see its job log)"
    )
    lsf = jobqueue.job_states(cluster, RunConfig(cluster="lsf").validate())
    assert jobqueue._queue_line(lsf, cluster) == "jobs 7, 8"
    assert issubclass(QueueStalled, ClusterLost)  # exit 4 (cli/entry.py)


def test_importing_dask_jobqueue_leaves_ctrl_c_as_it_was(monkeypatch):
    # Its runner module sets SIGINT to sys.exit() on import: a run's Ctrl-C would exit 0.
    for name in [name for name in sys.modules if name.startswith("dask_jobqueue")]:
        monkeypatch.delitem(sys.modules, name)  # imported afresh, then put back
    before = signal.getsignal(signal.SIGINT)
    jobqueue._import_dask_jobqueue()
    assert signal.getsignal(signal.SIGINT) is before


def test_its_defaults_come_back_after_a_config_block_removed_them(monkeypatch):
    # A dask.config.set block open at dask_jobqueue's first import removes its defaults on
    # exit; the next run in that process (a notebook's second call) needs them.
    monkeypatch.delitem(dask.config.config, "jobqueue")
    jobqueue._import_dask_jobqueue()
    assert dask.config.get("jobqueue.slurm.python", default="missing") is None
    assert dask.config.get("jobqueue.slurm.death-timeout") == 60


def test_device_cuda_is_not_refused_on_a_driver_without_a_gpu_when_jobs_have_them():
    # The workers run in batch jobs on GPU nodes (--job-directives '--gres=gpu:1'); the
    # login node that runs dane train may have none. A local cluster is still refused.
    from dask_dane.pipeline.launchers.cluster_checks import refuse_missing_gpu

    refuse_missing_gpu(RunConfig(cluster="slurm", device="cuda").validate())
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(SettingError, match="torch sees no GPU"):
            refuse_missing_gpu(RunConfig(device="cuda").validate())
