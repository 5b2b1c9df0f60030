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
        "dask-dane: cluster: 2 workers",
        "dask-dane: dashboard: http://10.0.0.5:8787/status",
        "dask-dane: DANE page: http://10.0.0.5:8787/dane",
    ]


def test_no_dane_page_without_a_dashboard():
    lines = _started("")

    assert lines == ["dask-dane: cluster: 2 workers"]


def test_the_start_up_lines_are_short_and_one_thing_each():
    from dask_dane.pipeline.observe.progress import startup_lines

    held = (
        "auto: resident (shard 0.1 MB); evaluation, a worker's part: test resident (0.2 MB); "
        "rounds: dask (auto: 2.00 MiB of weights, above 1 MiB Dask's transfers move them faster)"
    )
    assert startup_lines("http://h:8787/status", 4, held) == [
        "cluster: 4 workers",
        "shards: auto: resident (shard 0.1 MB)",
        "evaluation: test resident (0.2 MB)",
        "collective: dask (auto: 2.00 MiB of weights, above 1 MiB Dask's transfers move them "
        "faster)",
        "dashboard: http://h:8787/status",
        "DANE page: http://h:8787/dane",
    ]
