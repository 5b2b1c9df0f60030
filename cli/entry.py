"""`dane`'s entry (the console script, `python -m dask_dane`): runs the Typer app of
commands.py, and turns what a command raises into what the shell sees.

Errors print one line on stderr, without a traceback, and exit with a status that says
what went wrong:
  0  done;
  2  bad input (store, settings, config file, paths, an unreachable --scheduler): the line
     names the problem and the fix, and nothing was written;
  3  training diverged (loss or weights not finite): the line names the round and suggests a
     larger --mu or a smaller --local-lr; the last good checkpoint is kept;
  4  the cluster was lost (the scheduler stopped answering within --timeout, or a round kept
     failing as workers died): the run directory stays resumable with --resume; or it never
     came up (--cluster slurm: the queue did not start the jobs within --queue-timeout, the
     line names their queue state);
  130  stopped with Ctrl-C (`dane train` names the rounds kept and the command that continues
     the run: cli/train_lines.py).
"""

from __future__ import annotations

import sys

from .commands import app

EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3
EXIT_CLUSTER_LOST = 4


def main() -> None:
    """Console-script entry: errors become one line on stderr and an exit status (see top)."""
    from ..pipeline.engine.run.errors import ClusterLost, TrainingDiverged

    try:
        app(standalone_mode=True)
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_DIVERGED)
    except ClusterLost as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_CLUSTER_LOST)
    except ValueError as err:  # a SettingError names fields: here they read as the flags
        print(f"error: {_in_flags(err)}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def _in_flags(err: ValueError) -> str:
    """The message with a SettingError's fields worded as flags."""
    if not hasattr(err, "worded"):
        return str(err)
    # Only a SettingError words itself, so the settings are loaded already: the import costs
    # nothing, and the other commands' errors never wait for it.
    from ..pipeline.setup.config import in_flags

    return in_flags(err)
