"""A cluster that could not be reached or was lost (exit 4 in the CLI), and the one failure
caught before a cluster starts: a script that trains when it is imported.

Kept free of heavy imports so that cli/entry.py can tell them apart without loading torch
or Dask.

The missing main guard: the workers of a started cluster are spawned processes
(multiprocessing's spawn, Dask's default), and spawn first re-runs the parent's main script
in each of them, as the module `__mp_main__`. Without `if __name__ == "__main__":` that
re-run calls dask_dane.train (or prepare) again inside the child, which starts a cluster of
its own; multiprocessing refuses it with its "bootstrapping phase" traceback in every worker,
and the parent waits for workers that never come (measured with 2 workers: 178-200 lines,
still waiting after 300 s). Instead:
- the child leaves at its first dask-dane call, before it prints or writes anything, and
  marks a file that the parent named in its environment;
- the parent, whose workers then fail to start, finds the mark and says so in one line.
A child whose parent named no file (a pool of the user's, say) prints the line itself.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..engine.run.errors import ClusterLost


class QueueStalled(ClusterLost):
    """The job queue did not start the workers' jobs within --queue-timeout: the cluster
    never came up, so nothing was trained (exit 4, as a lost cluster)."""


# The missing main guard, caught.

MARK_ENV = "DASK_DANE_UNGUARDED_MAIN_MARK"
MESSAGE = (
    "error: this script trains when it is imported, and the workers of the cluster it starts "
    "import it again (multiprocessing spawn); put the code that trains under "
    '`if __name__ == "__main__":`'
)


def refuse_in_spawned_import() -> None:
    """Exit (non-zero) if called from a main script that a spawned process is re-running.

    Called first by every public entry that could start a cluster or write (train, prepare,
    make_client), so that the child neither prints, writes, nor starts processes.
    """
    # Returns unless multiprocessing re-runs the parent's main script in a new process:
    # `_inheriting` is the flag multiprocessing's own check reads for this very case
    # (spawn._check_not_importing_main); parent_process() is still None at this stage.
    inheriting = getattr(multiprocessing.current_process(), "_inheriting", False)
    if not (inheriting and "__mp_main__" in sys.modules):
        return
    mark = os.environ.get(MARK_ENV)
    if not mark:
        raise SystemExit(MESSAGE)
    Path(mark).touch()
    raise SystemExit(3)  # silent: the parent says it once, not once per worker


@contextmanager
def reporting_unguarded_main() -> Iterator[None]:
    """Around a cluster's start: a start that fails because the workers re-ran an unguarded
    script exits with MESSAGE (one line) instead of Dask's "Nanny failed to start"; and
    inside such a worker, refuse_in_spawned_import first: it never starts a cluster."""
    refuse_in_spawned_import()
    previous = os.environ.get(MARK_ENV)
    with tempfile.TemporaryDirectory(prefix="dask-dane-start-") as folder:
        mark = Path(folder) / "unguarded-main"
        os.environ[MARK_ENV] = str(mark)  # the spawned workers inherit it
        try:
            yield
        except Exception:
            if mark.exists():
                raise SystemExit(MESSAGE) from None
            raise
        finally:
            if previous is None:
                os.environ.pop(MARK_ENV, None)
            else:
                os.environ[MARK_ENV] = previous
