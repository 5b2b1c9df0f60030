"""The /dane dashboard page and the dane_* Prometheus metrics, from the "dane" events."""

from __future__ import annotations

import json
import math
import re
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dask_dane.pipeline.engine.run import bounded
from dask_dane.pipeline.observe.dashboard import (
    EVENT_TOPIC,
    ROUTE,
    DaneCollector,
    DanePage,
    columns,
    runs_from_events,
    worker_lines,
)
from dask_dane.pipeline.setup.config import RunConfig


def _event(run: str, t: int, accuracy: float | None = 0.5) -> tuple[float, dict]:
    row = {
        "run": run, "run_dir": f"/runs/{run}", "round": t, "comm_rounds": 2 * t,
        "wall_s": 1.5, "train_loss": 1.0 / t, "test_accuracy": accuracy,
        "val_accuracy": None if accuracy is None else accuracy + 0.1,
        "comm_bytes": 1000, "cum_comm_bytes": 1000 * t, "max_worker_compute_s": 1.2,
        "worker_compute_s": {"w1": 1.2, "w2": 0.9}, "noise_scale": 100.0 * t,
        "noise_scale_ema": 90.0 * t,
    }  # fmt: skip
    return (float(t), row)


class _Scheduler:
    def __init__(self, events: list) -> None:
        self.events = events

    def get_events(self, topic: str) -> tuple:
        assert topic == "dane"
        return tuple(self.events)


def test_runs_are_told_apart_and_become_columns_with_gaps():
    events = [_event("a", 1), _event("b", 1), _event("a", 2, accuracy=None), ("x", "not ours")]
    runs = runs_from_events(events)

    assert list(runs) == ["/runs/a (a)", "/runs/b (b)"]
    data = columns(runs["/runs/a (a)"])
    assert data["round"] == [1.0, 2.0] and data["wall"] == [1.5, 3.0]
    assert data["test_accuracy"][0] == 0.5 and math.isnan(data["test_accuracy"][1])
    assert data["val_accuracy"][0] == 0.6 and math.isnan(data["val_accuracy"][1])
    assert math.isnan(data["mu"][0])  # not a safeguarded run: nothing to draw
    lines = worker_lines(runs["/runs/a (a)"])
    assert lines["worker"] == ["w1", "w2"] and lines["ys"] == [[1.2, 1.2], [0.9, 0.9]]


def test_the_page_says_when_no_run_has_reported_and_follows_new_rounds():
    scheduler = _Scheduler([])
    page = DanePage(scheduler)
    assert "No dask-dane run" in page.status.text

    scheduler.events += [_event("a", 1), _event("a", 2)]
    page.update()
    assert page.select.value == "/runs/a (a)"
    assert list(page.source.data["round"]) == [1.0, 2.0]
    assert list(page.source.data["noise_scale_ema"]) == [90.0, 180.0]  # its own figure
    assert "round 2" in page.status.text

    scheduler.events += [_event("b", 1)]  # a second run: the page turns to it
    page.update()
    assert page.select.options == ["/runs/a (a)", "/runs/b (b)"]
    page.select.value = "/runs/a (a)"  # the user picks the first run again
    page.update()
    assert list(page.source.data["round"]) == [1.0, 2.0]


def test_the_collector_reports_each_runs_last_figures():
    registry = CollectorRegistry()
    registry.register(DaneCollector(_Scheduler([_event("a", 1), _event("a", 2, None)])))
    text = generate_latest(registry).decode()

    assert 'dane_round{run="a",run_dir="/runs/a"} 2.0' in text
    assert 'dane_test_accuracy{run="a",run_dir="/runs/a"} 0.5' in text  # the last evaluation
    assert 'dane_val_accuracy{run="a",run_dir="/runs/a"} 0.6' in text
    assert 'dane_train_loss{run="a",run_dir="/runs/a"} 0.5' in text
    assert 'dane_noise_scale{run="a",run_dir="/runs/a"} 180.0' in text
    assert 'dane_comm_bytes_total{run="a",run_dir="/runs/a"} 2000.0' in text


@pytest.mark.cluster
def test_a_live_scheduler_serves_the_page_and_the_metrics(digits_stores, cluster_client, tmp_path):
    from dask_dane.pipeline.training import train

    config = RunConfig(
        store=str(digits_stores[2]), out=str(tmp_path / "run"), model="small-cnn", rounds=2,
        local_steps=3,
    ).validate()  # fmt: skip
    train(config, client=cluster_client)

    base = cluster_client.dashboard_link.removesuffix("/status")
    assert base.startswith("http://127.0.0.1:")  # only where the dashboard already is
    with urllib.request.urlopen(base + ROUTE, timeout=30) as page:
        assert page.status == 200 and "bokeh" in page.read().decode().lower()
    with urllib.request.urlopen(base + "/metrics", timeout=30) as scrape:
        text = scrape.read().decode()
    run_dir = re.escape(str((tmp_path / "run").absolute()))
    assert re.search(rf'dane_round{{run="\w+",run_dir="{run_dir}"}} 2\.0', text), text[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    total = rows[-1]["cum_comm_bytes"]
    sent = re.search(rf'dane_comm_bytes_total{{run="\w+",run_dir="{run_dir}"}} (\S+)', text)
    assert sent and float(sent.group(1)) == total


def test_the_driver_publishes_rounds_on_the_topic_the_page_reads():
    # Two constants: the page's module runs in a scheduler and imports nothing of the package.
    assert bounded.EVENT_TOPIC == EVENT_TOPIC
