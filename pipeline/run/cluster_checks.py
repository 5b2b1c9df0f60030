"""What a cluster started here is checked for, in the driver's own words (cluster.py).

Before it starts: `--device cuda` needs a GPU that torch sees, refused in one line rather
than by every worker after the cluster's start (28 s of it). After it starts: a dashboard
port that was taken is said in one line, instead of Dask's 4-line warning.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    with quiet_port_warning():
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


@contextmanager
def quiet_port_warning() -> Iterator[None]:
    """Dask's warning about a taken dashboard port, silenced (note_dashboard_port says it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PORT_TAKEN, category=UserWarning)
        yield


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
