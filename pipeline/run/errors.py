"""Failures of a valid run (not of its input), each with its own exit status in the CLI.

Kept free of heavy imports so that cli/entry.py can tell them apart without loading torch
or Dask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: this module stays free of torch and Dask
    from pathlib import Path

    from ..setup.config import RunConfig


class TrainingDiverged(ValueError):
    """Loss or weights stopped being finite; the last good checkpoint is kept (exit 3)."""


class ClusterLost(RuntimeError):
    """The scheduler stopped answering, or workers kept dying; the run is resumable (exit 4)."""


class QueueStalled(ClusterLost):
    """The job queue did not start the workers' jobs within --queue-timeout: the cluster
    never came up, so nothing was trained (exit 4, as a lost cluster)."""


def give_up_after(max_attempts: int, t: int, attempts: int, err: BaseException) -> None:
    """ClusterLost once round t has failed `max_attempts` times as workers were lost."""
    if attempts > max_attempts:
        raise ClusterLost(
            f"round {t} failed {max_attempts} times as workers were lost "
            f"({type(err).__name__}: {err})"
        ) from None


def lost_message(config: RunConfig, run_dir: Path, t: int, reason: str, saved: int) -> str:
    """The line a lost cluster ends the run with: what was saved in `run_dir` (rounds
    1..saved, the last checkpoint, which --checkpoint-every may leave behind round t - 1) and
    how to go on."""
    cluster = f"the Dask cluster at {config.scheduler}" if config.scheduler else "the Dask cluster"
    if saved == 0:
        done = "no round finished" if t == 1 else "no checkpoint was written yet"
        return f"lost {cluster} in round {t}: {reason}; {done}; run the command again"
    return (
        f"lost {cluster} in round {t}: {reason}; rounds 1-{saved} are saved in {run_dir}; "
        f"start a cluster and continue with `dane train --out {run_dir} --resume`"
    )
