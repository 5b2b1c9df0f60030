"""A run directory is held by its run until the run ends (RunDir.claimed): a second run given
the same folder, or numbered the same by two `dane train` started at once, is refused in one
line and writes nothing there; the kernel lifts the hold when the holder dies, so a killed
driver's run resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dask_dane.pipeline.engine.run.rundir import RunDir

HOLD = """
import sys, time
from pathlib import Path
from dask_dane.pipeline.engine.run.rundir import RunDir
with RunDir(Path(sys.argv[1])).claimed():
    print("held", flush=True)
    time.sleep(600)
"""


def _listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_a_held_folder_is_refused_in_one_line_until_its_run_ends(tmp_path):
    run = RunDir(tmp_path / "run")
    with run.claimed():
        with (
            pytest.raises(ValueError, match="run is in use by another run") as refused,
            RunDir(tmp_path / "run").claimed(),
        ):
            pass
        assert "choose another --out" in str(refused.value) and "\n" not in str(refused.value)
        assert _listing(tmp_path) == ["run"]  # the hold writes nothing into the folder
    with RunDir(tmp_path / "run").claimed():  # released as its run ended
        pass


def test_dane_train_into_a_folder_another_run_holds_exits_2_and_writes_nothing(
    digits_stores, dane_here, tmp_path
):
    out = tmp_path / "run"
    with RunDir(out).claimed():
        done = dane_here(
            "train", str(digits_stores[2]), "--model", "mlp", "--rounds", "1", "--out", str(out),
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "in use by another run" in done.stderr
        assert "Traceback" not in done.stderr
        assert _listing(out) == []


@pytest.mark.cluster  # a process that holds the folder, then is killed
def test_the_hold_of_a_killed_run_is_lifted(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with (
            pytest.raises(ValueError, match="in use by another run"),
            RunDir(tmp_path / "run").claimed(),
        ):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)

    with RunDir(tmp_path / "run").claimed():  # what a resume after a killed driver does
        pass
