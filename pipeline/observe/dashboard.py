"""The /dane page of the scheduler's dashboard and dane_* Prometheus metrics.

Both live in the scheduler's process and read only the events the drivers publish after
each round (cluster.publish_round: topic "dane", tagged with the run's token and directory),
so they show any run on that scheduler, from any client, with no listener of their own:
the page is one more Bokeh application of the dashboard, the metrics come out of its
existing /metrics endpoint.

Installed by importing this module before the scheduler starts: `dane train` does for the
clusters it starts; a scheduler of your own takes one flag,
`dask scheduler --preload dask_dane.pipeline.observe.dashboard`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# Nothing of the package beyond this module is imported: it runs in the scheduler's process,
# which needs no torch.

EVENT_TOPIC = "dane"  # Client.get_events("dane"): one event per finished round
ROUTE = "/dane"
REFRESH_MS = 1000
SOURCE_NAME = "dane-rounds"  # the page's ColumnDataSource of round rows
COLUMNS = (
    "round",
    "comm_rounds",
    "wall",
    "train_loss",
    "val_accuracy",
    "test_accuracy",
    "comm_bytes",
    "max_worker_compute_s",
    "median_worker_compute_s",
    "safeguard_rejected",
    "mu",
    "noise_scale",
    "noise_scale_ema",
)
# (row field, dane_* gauge, its help): the last round's value for the fields EVERY_ROUND has,
# else the value at the run's last evaluation (rounds between evaluations have none).
GAUGES = (
    ("round", "dane_round", "Rounds the run has finished"),
    ("test_accuracy", "dane_test_accuracy", "Test accuracy at the last evaluation"),
    ("val_accuracy", "dane_val_accuracy", "Validation accuracy at the last evaluation"),
    ("train_loss", "dane_train_loss", "Training loss of the last round"),
    ("noise_scale_ema", "dane_noise_scale", "Gradient noise scale, smoothed (rows)"),
)
EVERY_ROUND = ("round", "train_loss")


def runs_from_events(events: Any) -> dict[str, list[dict[str, Any]]]:
    """Each run's rows in the order they came, keyed "<run dir> (<token>)"."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for _, msg in events:
        if isinstance(msg, dict) and "run" in msg and "round" in msg:
            runs.setdefault(f"{msg.get('run_dir', '?')} ({msg['run']})", []).append(msg)
    return runs


def columns(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """A run's rows as plot columns: missing values NaN (a gap), wall time summed."""
    data: dict[str, list[float]] = {name: [] for name in COLUMNS}
    wall = 0.0
    for row in rows:
        wall += row.get("wall_s") or 0.0
        for name in COLUMNS:
            value = wall if name == "wall" else row.get(name)
            data[name].append(math.nan if value is None else float(value))
    return data


def worker_lines(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """One line per worker: its compute time in each round (stragglers stand out)."""
    workers = sorted({w for row in rows for w in row.get("worker_compute_s", {})})
    xs = [[row["round"] for row in rows] for _ in workers]
    ys = [[row.get("worker_compute_s", {}).get(w, math.nan) for row in rows] for w in workers]
    return {"xs": xs, "ys": ys, "worker": workers}


class DanePage:
    """The page's figures and their data; `update` reads the scheduler's events again."""

    def __init__(self, scheduler: Any) -> None:
        from bokeh.layouts import column, gridplot
        from bokeh.models import ColumnDataSource, Div, Select

        self.scheduler = scheduler
        # Named, so that a browser (and tests/observe/test_browser.py) can read the plotted rows.
        self.source = ColumnDataSource({name: [] for name in COLUMNS}, name=SOURCE_NAME)
        self.workers = ColumnDataSource({"xs": [], "ys": [], "worker": []})
        self.status = Div(text="")
        self.select = Select(title="run", options=[], value="")
        self.select.on_change("value", lambda attr, old, new: self.update())
        grid = gridplot(self._figures(), ncols=3, width=420, height=260)
        self.root = column(self.status, self.select, grid)
        self.update()

    def _figures(self) -> list[Any]:
        from bokeh.plotting import figure

        def plot(title: str, x: str, y: str, **kw: Any) -> Any:
            fig = figure(title=title, x_axis_label=x, tools="pan,wheel_zoom,reset,hover", **kw)
            fig.line(x, y, source=self.source)
            fig.scatter(x, y, source=self.source, size=4)
            return fig

        def accuracy(title: str, x: str) -> Any:
            # The validation split (what selects best.pt) beside the test split; a run
            # without one (--val-fraction 0) leaves its line empty.
            fig = plot(title, x, "test_accuracy")
            fig.line(x, "val_accuracy", source=self.source, color="darkorange",
                     legend_label="validation")  # fmt: skip
            fig.legend.location = "bottom_right"
            return fig

        bytes_fig = figure(title="bytes per round", x_axis_label="round", tools="hover")
        bytes_fig.vbar(x="round", top="comm_bytes", width=0.8, source=self.source)
        workers_fig = figure(title="each worker's compute (s)", x_axis_label="round")
        workers_fig.multi_line("xs", "ys", source=self.workers)
        safeguard = plot("safeguard: mu", "round", "mu")
        safeguard.vbar(x="round", top="safeguard_rejected", width=0.5, source=self.source,
                       color="firebrick", legend_label="rejected steps")  # fmt: skip
        # The gradient noise scale (rows), the round's estimate and its moving average: what
        # more workers can still buy (docs/howto/workers.md); empty for algorithms without
        # a gradient phase.
        noise = plot("gradient noise scale (rows)", "round", "noise_scale_ema", y_axis_type="log")
        noise.scatter("round", "noise_scale", source=self.source, size=3, color="gray",
                      legend_label="this round's")  # fmt: skip
        return [
            plot("train loss", "round", "train_loss", y_axis_type="log"),
            accuracy("test (blue) and validation accuracy", "round"),
            accuracy("accuracy by communication round", "comm_rounds"),
            accuracy("accuracy by wall time (s)", "wall"),
            bytes_fig,
            workers_fig,
            safeguard,
            noise,
        ]

    def update(self) -> None:
        runs = runs_from_events(self.scheduler.get_events(EVENT_TOPIC))
        if not runs:
            self.status.text = "No dask-dane run has reported to this scheduler yet."
            return
        names = list(runs)
        if self.select.options != names:
            self.select.options = names
        if self.select.value not in runs:
            self.select.value = names[-1]  # the latest run; its on_change redraws
            return
        rows = runs[self.select.value]
        shown = f"showing {self.select.value}: round {rows[-1]['round']}"
        self.status.text = f"{len(runs)} run(s) on this scheduler; {shown}"
        self.source.data = columns(rows)
        self.workers.data = worker_lines(rows)


def dane_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """The Bokeh document of /dane (distributed's dashboard calls it per browser session)."""
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    page = DanePage(scheduler)
    doc.title = "Dask: dask-dane"
    add_periodic_callback(doc, page, REFRESH_MS)
    doc.add_root(page.root)
    doc.theme = BOKEH_THEME


class DaneCollector:
    """dane_* gauges and counters of every run on the scheduler, labelled by run."""

    def __init__(self, server: Any) -> None:
        self.server = server  # distributed sets it again for each scheduler of the process

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["run", "run_dir"]
        gauges = {key: GaugeMetricFamily(*named, labels=labels) for key, *named in GAUGES}
        sent = CounterMetricFamily("dane_comm_bytes", "Bytes the run's rounds moved", labels=labels)
        for rows in runs_from_events(self.server.get_events(EVENT_TOPIC)).values():
            last = rows[-1]
            tags = [str(last["run"]), str(last.get("run_dir", ""))]
            for key, gauge in gauges.items():
                value = last.get(key) if key in EVERY_ROUND else _last(rows, key)
                if value is not None:
                    gauge.add_metric(tags, float(value))
            sent.add_metric(tags, float(last.get("cum_comm_bytes", 0)))
        yield from gauges.values()
        yield sent


def _last(rows: list[dict[str, Any]], name: str) -> float | None:
    """The value at the run's last evaluation (rounds between evaluations have none)."""
    return next((r[name] for r in reversed(rows) if r.get(name) is not None), None)


def install() -> None:
    """Add the page and the collector to distributed's dashboard (once per process)."""
    try:
        from distributed.dashboard.scheduler import applications
    except ImportError:  # no bokeh: distributed serves no dashboard to add a page to
        return
    if ROUTE in applications:
        return
    applications[ROUTE] = dane_doc
    try:
        from distributed.http.scheduler.prometheus import core
    except ImportError:  # no prometheus_client: distributed serves no /metrics either
        return
    core.COLLECTORS.append(DaneCollector)
    if core.PrometheusHandler._collectors is not None:  # a scheduler here served /metrics
        import prometheus_client

        collector = DaneCollector(core.PrometheusHandler._collectors[0].server)
        core.PrometheusHandler._collectors = (*core.PrometheusHandler._collectors, collector)
        prometheus_client.REGISTRY.register(collector)


# On import: `dask scheduler --preload dask_dane.pipeline.observe.dashboard` needs no more.
install()
