"""A cluster started or reached here, checked: before and at its start, and its logs.

The driver's own words for what Dask would say at length or not at all (cluster.py calls it):
- before a cluster starts here: `--device cuda` needs a GPU that torch sees, refused in one
  line rather than by every worker after the cluster's start (28 s of it); after it starts:
  a dashboard port that was taken is said in one line, instead of Dask's 4-line warning;
- its logs: which loggers are the cluster's, and how their records go to one handler. Used on
  both sides: `dane train` sends the in-process scheduler's records to RUN_DIR/cluster.log
  (console.quiet_cluster_logs), and each worker of a cluster started here sends its own there
  too (cluster.WorkerLogsToFile). One list, so the two never disagree.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from ..algorithms.parts.setting_error import SettingError, setting
from ..setup.settings import ClusterSettings

# distributed/node.py warns so when the dashboard's port is taken (then it takes another).
PORT_TAKEN = r"Port \d+ is already in use"


def checked_start(config: ClusterSettings, start: Callable[[], Any]) -> Any:
    """The cluster `start()` returns, refused before it starts where --device cuda finds no
    GPU, and with a taken dashboard port said in one line."""
    refuse_missing_gpu(config)
    with warnings.catch_warnings():  # Dask's warning, said in one line below instead
        warnings.filterwarnings("ignore", message=PORT_TAKEN, category=UserWarning)
        cluster = start()
    note_dashboard_port(config.dashboard_address, cluster.dashboard_link)
    return cluster


def refuse_missing_gpu(config: ClusterSettings) -> None:
    """SettingError when --device cuda asks a cluster started here for a GPU torch cannot see.

    Only for a cluster started on this machine: the workers of a --scheduler cluster run
    elsewhere, and may have the GPUs the driver lacks.
    """
    if config.device != "cuda" or config.scheduler or config.scheduler_file:
        return
    if config.cluster != "local":  # its workers run in batch jobs, on the nodes' GPUs
        return
    import torch

    if not torch.cuda.is_available():
        raise SettingError(
            f"{setting('device', 'cuda')}, but torch sees no GPU on this machine "
            f"(torch.cuda.is_available() is False); use {setting('device', 'auto')} or "
            f"{setting('device', 'cpu')}, or pass {setting('scheduler')} of a cluster whose "
            "workers have GPUs"
        )


def note_dashboard_port(asked: str, link: str) -> str | None:
    """One line, logged, when the dashboard is not on the port `asked` (host:port) for; the
    line, or None where it is (or where any port would do)."""
    wanted = asked.rpartition(":")[2]
    try:
        port = urlsplit(link).port
    except ValueError:  # no dashboard (bokeh missing): nothing to say
        return None
    if not wanted.isdigit() or int(wanted) == 0 or port is None or port == int(wanted):
        return None
    line = f"dashboard port {wanted} is taken; the dashboard is at {link}"
    logging.getLogger(__name__).warning(line)
    return line


# The cluster's logs.

# Dask's own records, and Tornado's and Bokeh's (the dashboard's web server): a browser
# closing a dashboard page made Bokeh print a 30-line traceback between the progress bar's
# updates.
CLUSTER_LOGGERS = ("distributed", "tornado", "bokeh")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"

# A logger's handlers and its propagate flag, as they were before routing.
Saved = dict[str, tuple[list[logging.Handler], bool]]


def route_cluster_logs(handler: logging.Handler) -> Saved:
    """Give the cluster's top loggers `handler` alone (not propagated to the root's terminal
    handler); return what every logger touched had, for `restore_logs`.

    Loggers below them that Dask or Tornado gave handlers of their own pass their records
    up instead, to the one handler here.
    """
    below = [
        name
        for name, logger in list(logging.root.manager.loggerDict.items())
        if name.startswith(tuple(f"{top}." for top in CLUSTER_LOGGERS))
        and isinstance(logger, logging.Logger)  # not a PlaceHolder for a dotted parent
    ]
    saved: Saved = {}
    for name in [*CLUSTER_LOGGERS, *below]:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate)
        top = name in CLUSTER_LOGGERS
        logger.handlers, logger.propagate = ([handler], False) if top else ([], True)
    return saved


def restore_logs(saved: Saved) -> None:
    """Put back the handlers and propagate flags `route_cluster_logs` replaced."""
    for name, (handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = handlers, propagate
