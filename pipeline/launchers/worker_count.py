"""More workers than shards: a worker without a shard idles through every round.

A started LocalCluster's extra worker costs little, so it is a warning with the fix; a batch
job of a job-queue cluster (`--cluster slurm`) is paid for while it idles, so more jobs than
shards is refused before any is submitted. A running scheduler's workers are not ours to
size, and the shard placement names the ones it leaves idle.
"""

from __future__ import annotations

from ..algorithms.parts.setting_error import SettingError, setting
from ..setup.config import RunConfig


def idle_worker_warning(config: RunConfig, num_shards: int) -> str | None:
    """The warning for a started cluster of more workers than `num_shards`; SettingError for
    more batch jobs than shards; None where every worker holds a shard."""
    if config.scheduler is not None or config.scheduler_file is not None:
        return None
    if config.cluster != "local":
        jobs = config.jobs or config.workers
        if jobs > num_shards:
            raise SettingError(
                f"{jobs} batch jobs for a store of {num_shards} shards: "
                f"{jobs - num_shards} would hold no shard and idle while they are billed; pass "
                f"{setting('jobs', num_shards)}, or write the store with more shards "
                f"(dane prepare --shards {jobs})"
            )
        return None
    if config.workers <= num_shards:
        return None
    idle = config.workers - num_shards
    return (
        f"warning: {config.workers} workers for {num_shards} shards: {idle} will hold no shard "
        f"and idle; use {num_shards} workers (--workers {num_shards}), or write the store "
        f"with {config.workers} shards (--shards {config.workers}) to use them all"
    )
