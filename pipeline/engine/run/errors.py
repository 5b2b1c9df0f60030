"""Failures of a valid run in the driver, each with its own exit status in the CLI: a run
that diverged (exit 3), a lost cluster (exit 4) and the line it ends a run with.

Kept free of heavy imports so that cli/entry.py can tell them apart without loading torch
or Dask.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: this module stays free of torch and Dask
    from ..plan import EngineSettings


class ClusterLost(RuntimeError):
    """The scheduler stopped answering, or workers kept dying; the run is resumable (exit 4)."""


class TrainingDiverged(ValueError):
    """Loss or weights stopped being finite; the last good checkpoint is kept (exit 3)."""


def lost_message(config: EngineSettings, run_dir: Path, t: int, reason: str, saved: int) -> str:
    """The line a lost cluster ends the run with: what was saved in `run_dir` (rounds
    1..saved, the last checkpoint, which --checkpoint-every may leave behind round t - 1) and
    how to go on."""
    cluster = f"the Dask cluster at {config.scheduler}" if config.scheduler else "the Dask cluster"
    if saved == 0:
        done = "no round finished" if t == 1 else "no checkpoint was written yet"
        return f"lost {cluster} in round {t}: {reason}; {done}; run the command again"
    kept = "round 1 is" if saved == 1 else f"rounds 1-{saved} are"
    return (
        f"lost {cluster} in round {t}: {reason}; {kept} saved in {run_dir}; "
        f"start a cluster and continue with `dane train --out {run_dir} --resume`"
    )
