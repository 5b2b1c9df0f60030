"""Which loggers are the cluster's, and how their records are routed to one handler.

Used on both sides: the driver's `dane train` sends the in-process scheduler's records to
RUN_DIR/cluster.log (console.quiet_cluster_logs), and each worker of a cluster started here
sends its own there too (cluster.WorkerLogsToFile). One list, so the two never disagree.
Logging only: a worker imports this without the rest of the pipeline.
"""

from __future__ import annotations

import logging

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
