"""`dane watch`: follows a run directory another process is writing, and stops with it."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from dask_dane.cli.watch import follow, render, sparkline
from dask_dane.pipeline.setup.config import RunConfig, to_toml


def _row(t: int) -> dict:
    return {
        "round": t, "algorithm": "dane", "train_loss": 1.0 / t, "test_accuracy": 0.5 + 0.1 * t,
        "comm_bytes": 2_000_000, "cum_comm_bytes": 2_000_000 * t, "comm_rounds": 2 * t,
        "max_worker_compute_s": 1.5, "median_worker_compute_s": 1.2, "wall_s": 1.75,
        "slowest_worker": "host:4242",
    }  # fmt: skip


def test_sparkline_scales_between_its_own_extremes():
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([3.0, 3.0]) == "▁▁"  # flat: no division by zero
    assert len(sparkline(list(range(100)))) == 40  # the latest rounds only
    assert sparkline([]) == ""


def test_the_view_names_round_loss_accuracy_bytes_and_the_slowest_worker():
    view = render([_row(1), _row(2)], planned=5, finished=False)

    assert "round 2 of 5" in view and "training" in view
    assert "0.5000" in view and "70.00 %" in view
    assert "2.00 MB this round, 4.0 MB in all, 4 comm rounds" in view
    assert "host:4242: 1.50 s" in view


def test_follow_redraws_as_rounds_arrive_and_stops_at_the_summary(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(to_toml(RunConfig(rounds=3)))

    def trainer() -> None:  # another process's run, as seen through its files
        for t in (1, 2, 3):
            time.sleep(0.1)
            with (run / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(_row(t)) + "\n")
        (run / "summary.json").write_text("{}")

    out = io.StringIO()
    writer = threading.Thread(target=trainer)
    writer.start()
    started = time.monotonic()
    follow(run, interval=0.02, console=Console(file=out, width=120, force_terminal=True))
    writer.join()

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())  # the terminal's codes
    assert time.monotonic() - started < 10
    assert "waiting for the first round" in text or "round 1 of 3" in text
    assert "round 3 of 3" in text and "finished" in text


@pytest.mark.cluster  # starts a `dane watch` process
def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", "watch", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "is not a run directory" in line and "--out" in line
