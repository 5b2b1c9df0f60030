"""Failures of a valid run (not of its input), each with its own exit status in the CLI.

Kept free of heavy imports so that cli/entry.py can tell them apart without loading torch
or Dask.
"""

from __future__ import annotations


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
