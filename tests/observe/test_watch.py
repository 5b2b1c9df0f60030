"""`dane watch`: follows a run directory another process is writing, and stops with it: a
redrawn view on a terminal, a line a round elsewhere, an ETA in both."""

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

from dask_dane.cli.watch import duration, eta_seconds, follow, render, sparkline
from dask_dane.pipeline.setup.config import RunConfig, to_toml


def _row(t: int, wall_s: float = 1.75) -> dict:
    return {
        "round": t, "algorithm": "dane", "train_loss": 1.0 / t, "test_accuracy": 0.5 + 0.1 * t,
        "comm_bytes": 2_000_000, "cum_comm_bytes": 2_000_000 * t, "comm_rounds": 2 * t,
        "max_worker_compute_s": 1.5, "median_worker_compute_s": 1.2, "wall_s": wall_s,
        "slowest_worker": "host:4242",
    }  # fmt: skip


def _finished_run(root, walls: list[float], planned: int):
    """A run folder as `dane train --out` leaves it after len(walls) rounds of `planned`."""
    root.mkdir()
    (root / "config.toml").write_text(to_toml(RunConfig(rounds=planned)))
    rows = [_row(t, wall) for t, wall in enumerate(walls, start=1)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        "rounds": len(rows), "final_test_accuracy": rows[-1]["test_accuracy"],
        "best_round": len(rows), "test_accuracy_at_best": rows[-1]["test_accuracy"],
        "total_wall_s": sum(walls),
    }  # fmt: skip
    (root / "summary.json").write_text(json.dumps(summary))
    return root


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


def test_a_folder_that_is_not_a_run_is_one_line_and_exit_2(tmp_path, dane_here):
    (tmp_path / "notes.txt").write_text("not a run")  # a folder of other things: no wait
    started = time.monotonic()
    done = dane_here("watch", str(tmp_path), cwd=tmp_path)  # main()'s check, in this process
    assert done.returncode == 2
    assert time.monotonic() - started < 30  # refused at once, not after --wait's 60 s
    (line,) = done.stderr.strip().splitlines()
    assert "is not a run directory" in line and "--out" in line


def test_a_run_folder_that_never_appears_is_waited_for_then_one_line(tmp_path, dane_here):
    started = time.monotonic()
    done = dane_here("watch", "runs/later", "--wait", "0.5", "--interval", "0.05", cwd=tmp_path)

    assert time.monotonic() - started >= 0.5  # it waited
    assert done.returncode == 2
    waiting, error = done.stderr.strip().splitlines()
    assert waiting == "waiting for runs/later to start (up to 0.5 s, --wait) ..."
    assert error.startswith("error: runs/later is not a run directory")
    assert "after 0.5 s of waiting" in error and "--out" in error
    assert done.stdout == ""


def test_the_eta_is_the_rounds_left_at_the_last_rounds_pace():
    # A slow first round (start-up) is outside the last five rounds, so not in the pace.
    rows = [_row(t, wall) for t, wall in enumerate([100, 10, 10, 10, 10, 15], start=1)]

    assert eta_seconds(rows, planned=12) == pytest.approx(6 * 11.0)
    assert eta_seconds(rows, planned=6) == 0.0
    assert eta_seconds(rows, planned=None) is None and eta_seconds([], planned=12) is None
    assert [duration(s) for s in (4.4, 65, 3 * 3600 + 125)] == ["4s", "1m 05s", "3h 02m"]


def test_the_terminal_view_shows_the_eta_and_ends_with_a_newline(tmp_path):
    run = _finished_run(tmp_path / "run", [2.0, 2.0], planned=5)
    out = io.StringIO()

    view = render([_row(1, 20.0), _row(2, 19.0)], planned=6, finished=False)
    follow(run, interval=0.01, console=Console(file=out, width=120, force_terminal=True))

    assert "ETA            ~ 1m 16s, from the last rounds' pace" in view  # round 1 is start-up
    assert "ETA            -" in render([_row(1)], planned=None, finished=False)
    assert re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).endswith("\n")


def test_piped_it_writes_a_line_a_round_with_the_eta_and_a_final_line(tmp_path, dane_here):
    _finished_run(tmp_path / "run", [3.0, 2.0, 2.5], planned=4)

    done = dane_here("watch", "run", "--interval", "0.01", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n")
    lines = done.stdout.splitlines()
    assert lines[1:] == [
        "round 1 of 4: train loss 1.0000, test accuracy 60.00 %, 2.00 MB this round, "
        "round 3.00 s, ETA -",  # round 1 holds the start-up: no pace
        "round 2 of 4: train loss 0.5000, test accuracy 70.00 %, 2.00 MB this round, "
        "round 2.00 s, ETA ~ 4s",
        "round 3 of 4: train loss 0.3333, test accuracy 80.00 %, 2.00 MB this round, "
        "round 2.50 s, ETA ~ 2s",
        "finished: 3 rounds in 8s, test accuracy 80.00 %, best round 3 (80.00 %)",
    ]
    assert lines[0].startswith("watching run, 4 rounds planned")


@pytest.mark.cluster  # starts a `dane watch` process
def test_a_live_run_through_a_pipe_gets_its_lines_as_the_rounds_come(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(to_toml(RunConfig(rounds=2)))
    watcher = subprocess.Popen(
        [sys.executable, "-m", "dask_dane.cli", "watch", str(run), "--interval", "0.05"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert watcher.stdout.readline().startswith(f"watching {run}, 2 rounds planned")
        with (run / "metrics.jsonl").open("a") as metrics:
            metrics.write(json.dumps(_row(1)) + "\n")
        # Read while the run is still going: the line is flushed, not held until the end.
        assert watcher.stdout.readline().startswith("round 1 of 2: train loss 1.0000")
        with (run / "metrics.jsonl").open("a") as metrics:
            metrics.write(json.dumps(_row(2)) + "\n")
        (run / "summary.json").write_text(json.dumps({"rounds": 2}))
        rest = watcher.communicate(timeout=60)[0]
    finally:
        watcher.kill()
    assert watcher.returncode == 0
    assert rest.endswith("\n") and "ETA ~ 0s" in rest and "finished: 2 rounds" in rest


@pytest.mark.cluster  # a `dane watch` process started before the run's folder exists
def test_watch_started_before_train_waits_for_its_folder_and_follows_it(
    tmp_path, digits_stores, cluster_client, dane_here
):
    run = tmp_path / "runs" / "early"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "dask_dane", "watch", str(run), "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Before: `error: ... is not a run directory`, exit 2, as the folder was not there yet.
        assert watcher.stderr.readline() == f"waiting for {run} to start (up to 60 s, --wait) ...\n"
        trained = dane_here(
            "train", str(digits_stores[2]), "--model", "mlp", "--rounds", "2", "--out", str(run),
            "--scheduler", cluster_client.scheduler.address, cwd=tmp_path,
        )  # fmt: skip
        out, err = watcher.communicate(timeout=60)
    finally:
        watcher.kill()

    assert trained.returncode == 0, trained.stderr
    assert trained.stderr.splitlines()[1] == f"watch it with: dane watch {run}"
    assert watcher.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"watching {run}, 2 rounds planned")
    assert [line.split(":")[0] for line in lines[1:3]] == ["round 1 of 2", "round 2 of 2"]
    assert lines[-1].startswith("finished: 2 rounds")
