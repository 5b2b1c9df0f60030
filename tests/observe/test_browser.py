"""The /dane page in a real browser (headless Chromium driven by Playwright) while `dane
train` runs, as a user watches it: the page draws its plots and follows new rounds, and
opening and closing dashboard pages leaves the training terminal clean (issue 16, item 7:
each closed page used to print a 30-line Tornado/Bokeh traceback into it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dask_dane.pipeline.observe.dashboard import SOURCE_NAME

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]
STATUS = re.compile(r"(\d+) run\(s\) on this scheduler; showing (.+): round (\d+)")
# The rows the page plots, read from its Bokeh document in the browser (DanePage's source).
PLOTTED = """() => {
  const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
  const source = doc && doc.get_model_by_name("SOURCE");
  if (!source) return null;
  const data = source.data;
  const column = (k) => Array.from(data instanceof Map ? data.get(k) : data[k]);
  return {round: column("round"), train_loss: column("train_loss"),
          test_accuracy: column("test_accuracy")};
}""".replace("SOURCE", SOURCE_NAME)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _round_shown(page) -> tuple[str, int] | None:
    """(run, round) from the page's status line; text locators pierce Bokeh's shadow roots."""
    status = page.get_by_text(STATUS)
    if not status.count():
        return None
    found = STATUS.search(status.first.inner_text(timeout=10_000))
    return (found.group(2), int(found.group(3))) if found else None


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _start_training(store: Path, tmp_path: Path, port: int) -> subprocess.Popen:
    """`dane train` of 40 rounds, its dashboard on `port`, its output captured."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "dask_dane.cli", "train", str(store),
            "--out", str(tmp_path / "run"), "--workers", "2", "--rounds", "40",
            "--model", "small-cnn", "--local-steps", "40", "--dashboard-address",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "DANE_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip


def _open_and_close(browser: Any, urls: list[str]) -> None:
    """Each page opened, left to load and draw for 1.5 s, and closed."""
    for url in urls:
        other = browser.new_page()
        other.goto(url, wait_until="load")
        other.wait_for_timeout(1500)
        other.close()


def test_the_dane_page_follows_a_run_and_closed_pages_leave_the_terminal_clean(
    digits_stores, tmp_path
):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    train = _start_training(digits_stores[2], tmp_path, port)
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1320, "height": 980})
            _wait_for(lambda: _load(page, base + "/dane"), 90, "the dashboard")
            first = _wait_for(lambda: _round_shown(page), 90, "the first round on /dane")
            # Seven Bokeh plots drawn (canvas elements inside their shadow roots).
            assert page.locator("canvas").count() >= 7
            plotted_first = _wait_for(lambda: page.evaluate(PLOTTED), 30, "the plotted rows")
            # Other pages opened and closed while it trains, as the user in the issue did.
            _open_and_close(browser, [base + r for r in ("/status", "/dane", "/status")])
            later = _wait_for(
                lambda: (shown := _round_shown(page)) and shown[1] > first[1] and shown,
                120,
                "a later round on the open page (its periodic update)",
            )
            assert later[0] == first[0]  # the same run, followed
            assert str(tmp_path / "run") in first[0]  # named by its run directory
            plotted = page.evaluate(PLOTTED)
            shot = Path(os.environ.get("DANE_PAGE_SCREENSHOT") or tmp_path / "dane.png")
            page.screenshot(path=str(shot), full_page=True)  # docs/img/dane-page.png: README
            browser.close()
        stdout, stderr = train.communicate(timeout=300)
    finally:
        if train.poll() is None:
            train.kill()
            train.communicate()
    assert train.returncode == 0, stderr
    terminal = stdout + stderr
    for noise in ("Traceback", "AssertionError", "tornado", "bokeh.server", "ERROR"):
        assert noise not in terminal, terminal[-3000:]
    assert "test accuracy" in terminal.lower()
    assert (Path(tmp_path / "run") / "cluster.log").exists()  # where the cluster's logs went
    # The points plotted grew with the rounds, and are the run's own metrics.jsonl rows.
    assert len(plotted["round"]) > len(plotted_first["round"]) >= 1
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert plotted["round"] == [r["round"] for r in rows[: len(plotted["round"])]]
    for name in ("train_loss", "test_accuracy"):
        assert plotted[name] == pytest.approx([r[name] for r in rows[: len(plotted[name])]])
    # The screenshot holds the page: a PNG of the viewport's width and more than blank bytes.
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(header[16:20]) == 1320
    assert shot.stat().st_size > 30_000


def _load(page, url: str) -> bool:
    try:
        page.goto(url, wait_until="load", timeout=10_000)
    except sync_api.Error:
        return False  # the cluster is still starting
    return True
