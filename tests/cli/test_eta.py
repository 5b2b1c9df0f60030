"""The ETA of `dane train`'s bar and of `dane watch`: none until a round after a process's first
(round 1, or a resume's first, holds the start-up: after round 1 of a 26 s run it read 3m 33s),
then the latest rounds' pace; rounds longer than 30 s get one too."""

from __future__ import annotations

from dask_dane.cli.console import TrainingProgress
from dask_dane.cli.watch import eta, eta_seconds, planned_rounds
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig, to_toml
from dask_dane.pipeline.setup.resumed import Resume


def _row(t: int, wall_s: float) -> dict:
    return {"round": t, "train_loss": 1.0 / t, "test_accuracy": None, "wall_s": wall_s}


def test_the_first_round_is_no_pace_the_rounds_after_it_are():
    rows = [_row(1, 11.2), _row(2, 0.8)]  # start-up, then the run's own pace

    assert eta_seconds(rows[:1], planned=20) is None  # was 19 x 11.2 s = 3m 33s
    assert eta(rows[:1], planned=20) == "-"
    assert eta_seconds(rows, planned=20) == 18 * 0.8  # round 1 left out


def test_a_resume_s_first_round_is_no_pace_either(tmp_path):
    (tmp_path / "config.toml").write_text(
        to_toml(RunConfig(rounds=10), resumed=[Resume(after_round=4, changes={})])
    )
    walls = [9.0, 1.0, 1.0, 1.0, 7.0, 2.0]  # round 5: the resumed process's start-up

    planned, first = planned_rounds(RunDir(tmp_path))
    rows = [_row(t, wall) for t, wall in enumerate(walls, start=1)]

    assert (planned, first) == (10, (1, 5))
    assert eta_seconds(rows, planned, first=first) == 4 * (1.0 + 1.0 + 1.0 + 2.0) / 4


def _bar_after(walls: list[float], *, resume_at: int = 0) -> list[str]:
    """The bar's ETA after each round of `walls`, its first round `resume_at + 1`."""
    bar = TrainingProgress(RunConfig(rounds=20, out="unused"))
    shown = []
    for t, wall in enumerate(walls, start=resume_at + 1):
        bar.on_round(_row(t, wall))
        shown.append(bar.bar.tasks[0].fields["eta"])
    return shown


def test_the_bar_shows_no_eta_after_its_first_round_then_the_pace_after_it():
    assert _bar_after([11.2, 0.8, 1.2]) == ["-", "~ 14s", "~ 17s"]  # 18 x 0.8, 17 x 1.0
    assert _bar_after([30.0, 2.0], resume_at=8) == ["-", "~ 20s"]  # a resume's first round
    assert _bar_after([90.0, 40.0, 40.0]) == ["-", "~ 12m 00s", "~ 11m 20s"]  # > 30 s rounds
