"""A script without `if __name__ == "__main__":` gets one line, ends within its --timeout, and
leaves neither a run directory nor a process behind (pipeline/launchers/errors.py).

Before: each spawned worker re-ran the script, printed multiprocessing's "bootstrapping phase"
traceback (178 to 200 lines in all) and the driver was still waiting after 300 s.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dask_dane.pipeline.launchers import errors
from dask_dane.pipeline.launchers.errors import MARK_ENV, refuse_in_spawned_import

TIMEOUT_S = 20  # the run's --timeout; interpreter start and torch's import come on top
STARTUP_S = 25  # the driver's and each worker's imports, on a loaded 2-core machine
FIX = 'if __name__ == "__main__":'

TRAIN = """
import dask_dane
dask_dane.train({store!r}, model="logistic", algorithm="fedavg", rounds=1, workers=2,
                out={out!r}, timeout={timeout}, dashboard_address=":0")
"""
PREPARE_THEN_TRAIN = """
import numpy as np
import dask_dane
x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
store = dask_dane.prepare({store!r}, train=(x, np.arange(60) % 2), test=(x[:10], np.arange(10) % 2))
dask_dane.train(store, model="logistic", algorithm="fedavg", rounds=1, workers=2, out={out!r},
                timeout={timeout}, dashboard_address=":0")
"""


@pytest.fixture(scope="module")
def tabular_store(tmp_path_factory) -> Path:
    import numpy as np

    import dask_dane

    x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
    out = tmp_path_factory.mktemp("guard") / "store.zarr"
    return dask_dane.prepare(out, train=(x, np.arange(60) % 2), test=(x[:10], np.arange(10) % 2))


def _tagged(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries `tag` (the script's and all it started)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("DANE_TEST_TAG") == tag:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _left_after(tag: str, seconds: float = 1.0) -> list[psutil.Process]:
    """The tagged processes still alive `seconds` after the script ended (the workers' exit
    reaped by then), found as soon as none is left rather than after a fixed sleep."""
    deadline = time.monotonic() + seconds
    while (left := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _run_script(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess, float, str]:
    script = tmp_path / "train_me.py"
    script.write_text(text)
    tag = uuid.uuid4().hex
    env = {**os.environ, "DANE_TEST_TAG": tag}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + STARTUP_S + 60,  # a hang fails here, not after 300 s
    )
    return done, time.monotonic() - started, tag


@pytest.mark.cluster
@pytest.mark.parametrize("text", [TRAIN, PREPARE_THEN_TRAIN], ids=["train", "prepare-train"])
def test_an_unguarded_script_gets_one_line_and_leaves_nothing_behind(tmp_path, tabular_store, text):
    out = tmp_path / "run"
    store = tabular_store if text is TRAIN else tmp_path / "store.zarr"

    done, elapsed, tag = _run_script(
        tmp_path, text.format(out=str(out), store=str(store), timeout=TIMEOUT_S)
    )

    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0
    assert [line for line in lines if FIX in line] == [lines[-1]], done.stderr
    assert lines[-1].startswith("error: ")
    assert "Traceback" not in done.stderr and "bootstrapping" not in done.stderr
    assert len(lines) <= 2, done.stderr  # the line, after at most the run's own start line
    assert not out.exists() and not (tmp_path / "runs").exists()
    assert elapsed < TIMEOUT_S + STARTUP_S, elapsed
    assert _left_after(tag) == []


@pytest.mark.cluster
def test_a_guarded_script_trains_as_before(tmp_path, tabular_store):
    out = tmp_path / "run"
    body = TRAIN.format(out=str(out), store=str(tabular_store), timeout=60).strip().splitlines()
    guarded = "\n".join([body[0], f"{FIX}", *(f"    {line}" for line in body[1:])])

    done, _, tag = _run_script(tmp_path, guarded + "\n")

    assert done.returncode == 0, done.stderr
    assert FIX not in done.stderr
    assert (out / "summary.json").exists()
    assert _left_after(tag) == []


@pytest.fixture
def bootstrapping(monkeypatch):
    """This process as multiprocessing's spawn sees a child re-running the parent's script."""
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    monkeypatch.setitem(sys.modules, "__mp_main__", sys.modules[__name__])


def test_outside_a_spawned_import_nothing_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "__mp_main__", sys.modules[__name__])  # a spawned worker

    refuse_in_spawned_import()  # returns: the worker has finished re-running the script


def test_a_spawned_import_marks_the_parents_file_and_exits_silently(
    bootstrapping, monkeypatch, tmp_path
):
    mark = tmp_path / "mark"
    monkeypatch.setenv(MARK_ENV, str(mark))

    with pytest.raises(SystemExit) as exit_:
        refuse_in_spawned_import()

    assert exit_.value.code == 3 and mark.exists()


def test_a_spawned_import_without_a_parent_of_ours_says_the_fix_itself(bootstrapping, monkeypatch):
    monkeypatch.delenv(MARK_ENV, raising=False)

    with pytest.raises(SystemExit) as exit_:
        refuse_in_spawned_import()

    assert FIX in str(exit_.value.code)


def test_the_parent_says_the_fix_only_when_a_worker_left_the_mark(monkeypatch):
    monkeypatch.delenv(MARK_ENV, raising=False)
    # Another failure to start: raised as it was.
    with pytest.raises(RuntimeError, match="Nanny failed"), errors.reporting_unguarded_main():
        raise RuntimeError("Nanny failed to start.")

    with pytest.raises(SystemExit) as exit_, errors.reporting_unguarded_main():
        Path(os.environ[MARK_ENV]).touch()  # what a worker re-running the script does
        raise RuntimeError("Nanny failed to start.")

    assert str(exit_.value.code) == errors.MESSAGE and FIX in errors.MESSAGE
    assert MARK_ENV not in os.environ  # restored
