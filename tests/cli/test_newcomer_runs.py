"""A second experiment needs no new flag: each run without --out gets a fresh folder, named
first; --resume without --out continues the newest; a finished run resumed says it trained
nothing; Ctrl-C names the command that continues the run (exit 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dask_dane.pipeline.plan import fresh_run_dir, newest_run_dir


def test_fresh_run_folders_take_the_next_free_number(tmp_path):
    runs = tmp_path / "runs"
    assert fresh_run_dir("dane", runs) == runs / "dane-1"  # no runs/ yet: nothing is created
    assert not runs.exists()
    for name in ("dane-1", "dane-7", "dane-x", "fedavg-9", "dane-2-old"):
        (runs / name).mkdir(parents=True)
    assert fresh_run_dir("dane", runs) == runs / "dane-8"
    assert fresh_run_dir("fedavg", runs) == runs / "fedavg-10"
    assert fresh_run_dir("sgd", runs) == runs / "sgd-1"


def test_resume_without_out_names_the_fix_when_there_is_no_run(tmp_path):
    with pytest.raises(ValueError, match="pass --out RUN_DIR"):
        newest_run_dir(tmp_path / "runs")


def _train(dane_here, cwd: Path, store: Path, *flags: str):
    done = dane_here("train", str(store), "--model", "mlp", "--rounds", "1", *flags, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.cluster
def test_a_second_third_and_fourth_experiment_need_no_new_flag(tmp_path, dane_here, digits_stores):
    store = digits_stores[2]
    first = _train(dane_here, tmp_path, store)
    second = _train(dane_here, tmp_path, store)  # before: refused, runs/latest held a run
    third = _train(dane_here, tmp_path, store, "--algorithm", "fedavg")

    for done, folder in ((first, "dane-1"), (second, "dane-2"), (third, "fedavg-1")):
        assert done.stderr.splitlines()[0] == f"run folder: runs/{folder}"
        assert done.stdout.splitlines()[-1].endswith(f"; run in runs/{folder}")
        assert ": 1 round, test accuracy" in done.stdout  # not "1 rounds"
        assert (tmp_path / "runs" / folder / "summary.json").is_file()

    again = dane_here("train", "--resume", cwd=tmp_path)  # the newest run: fedavg-1
    assert again.returncode == 0, again.stderr
    assert "runs/fedavg-1 already finished its 1 round: nothing to train" in again.stderr
    assert len(list((tmp_path / "runs").iterdir())) == 3


@pytest.mark.cluster  # a real `dane` process, stopped as a terminal's Ctrl-C stops it
def test_ctrl_c_exits_130_naming_the_command_that_continues_the_run(tmp_path, digits_stores):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "dask_dane", "train", str(digits_stores[2]), "--model",
               "mlp", "--rounds", "100000", "--workers", "1", "--out", str(run)]  # fmt: skip
    env = {**os.environ, "DANE_CACHE": str(tmp_path / "cache")}
    # Its own process group, as a terminal's foreground job: Ctrl-C reaches every process in
    # it, the driver and its worker processes alike (before: each worker printed a traceback).
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text():
        assert process.poll() is None and time.monotonic() < deadline, "no round was recorded"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    stderr = process.communicate(timeout=120)[1]

    assert process.returncode == 130, stderr
    assert f"; continue with: dane train --resume --out {run}" in stderr.splitlines()[-1]
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr


def test_one_saved_round_is_said_in_the_singular():
    from dask_dane.pipeline.engine.run.errors import lost_message
    from dask_dane.pipeline.setup.config import RunConfig

    line = lost_message(RunConfig(), Path("runs/dane-1"), 2, "gone", saved=1)
    assert "; round 1 is saved in runs/dane-1;" in line
    assert "; rounds 1-3 are saved in" in lost_message(RunConfig(), Path("r"), 4, "gone", saved=3)


@pytest.mark.cluster
def test_a_resume_says_where_it_starts_and_its_bar_starts_there(
    tmp_path, dane_here, digits_stores, cluster_client
):
    run = tmp_path / "run"
    flags = ("--scheduler", cluster_client.scheduler.address, "--out", str(run))
    _train(dane_here, tmp_path, digits_stores[2], "--rounds", "2", *flags)

    resumed = dane_here("train", "--resume", "--rounds", "3", *flags, cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    # Before: `run folder: RUN`, and the bar from 0/3: nothing said where the run went on.
    assert resumed.stderr.splitlines()[0] == f"resuming {run} after round 2 of 3"
    assert ": 3 rounds, test accuracy" in resumed.stdout.splitlines()[-1]


def test_a_resumed_runs_bar_starts_at_its_last_saved_round(tmp_path):
    from dask_dane.cli.console import TrainingProgress
    from dask_dane.pipeline.setup.config import RunConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(f'{{"round": {t}}}\n' for t in range(1, 9)))
    bar = TrainingProgress(RunConfig(rounds=20, out=str(run)), resume=True)
    fresh = TrainingProgress(RunConfig(rounds=20, out=str(run)))

    with bar, fresh:
        bar.on_start("http://127.0.0.1:8787/status", 2)
        fresh.on_start("http://127.0.0.1:8787/status", 2)
        assert (bar.bar.tasks[0].completed, bar.bar.tasks[0].total) == (8, 20)
        assert fresh.bar.tasks[0].completed == 0
