"""`dask_dane.train`'s progress lines link the run's own dashboard page, /dane, as `dane
train` does, where the cluster has a dashboard."""

from __future__ import annotations

import io

from rich.console import Console

from dask_dane.pipeline.observe.progress import ProgressLines


def _started(dashboard: str) -> list[str]:
    out = io.StringIO()
    ProgressLines(Console(file=out, width=200)).on_start(dashboard, 2)
    return out.getvalue().splitlines()


def test_the_progress_lines_print_the_dane_page_once():
    lines = _started("http://10.0.0.5:8787/status")

    assert lines == [
        "dask-dane: 2 workers ready, dashboard http://10.0.0.5:8787/status",
        "dask-dane: DANE page: http://10.0.0.5:8787/dane",
    ]


def test_no_dane_page_without_a_dashboard():
    lines = _started("")

    assert len(lines) == 1 and "DANE page" not in lines[0]
