"""More workers than shards: a started cluster's idle worker is a warning naming the fix; more
batch jobs than shards (billed while idle) is refused before any is submitted."""

from __future__ import annotations

import pytest

from dask_dane.pipeline.algorithms.parts.setting_error import SettingError
from dask_dane.pipeline.launchers.worker_count import idle_worker_warning
from dask_dane.pipeline.setup.config import RunConfig, in_flags


def test_a_started_cluster_with_an_idle_worker_is_warned_with_the_fix():
    warning = idle_worker_warning(RunConfig(workers=3), num_shards=2)
    assert warning == (
        "warning: 3 workers for 2 shards: 1 will hold no shard and idle; use 2 workers "
        "(--workers 2), or write the store with 3 shards (--shards 3) to use them all"
    )
    assert idle_worker_warning(RunConfig(workers=2), num_shards=2) is None
    assert idle_worker_warning(RunConfig(workers=1), num_shards=4) is None


def test_a_running_scheduler_is_not_sized_by_us():
    config = RunConfig(workers=8, scheduler="tcp://127.0.0.1:8786")
    assert idle_worker_warning(config, num_shards=2) is None


def test_more_batch_jobs_than_shards_is_refused_naming_the_fix():
    with pytest.raises(SettingError) as refused:
        idle_worker_warning(RunConfig(cluster="slurm", jobs=8), num_shards=2)
    assert in_flags(refused.value) == (
        "8 batch jobs for a store of 2 shards: 6 would hold no shard and idle while they are "
        "billed; pass --jobs 2, or write the store with more shards (dane prepare --shards 8)"
    )
    # --jobs defaults to --workers
    with pytest.raises(SettingError):
        idle_worker_warning(RunConfig(cluster="slurm", workers=3), num_shards=2)
    assert idle_worker_warning(RunConfig(cluster="slurm", jobs=2), num_shards=2) is None


@pytest.mark.cluster
def test_dane_train_with_more_workers_than_shards_says_so(tmp_path, dane_here, digits_stores):
    done = dane_here("train", str(digits_stores[2]), "--model", "mlp", "--rounds", "1",
                     "--workers", "3", "--out", str(tmp_path / "run"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning: 3 workers for 2 shards: 1 will hold no shard and idle" in done.stderr
