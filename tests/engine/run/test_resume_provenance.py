"""Resumes that keep provenance: a resume may change only the declared settings, config.toml
keeps the original settings and one [[resumed]] table per resume, each round's row holds the
rate (and K) its schedules gave it, and `dane report` labels from the record."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

import dask_dane
from dask_dane.pipeline.algorithms.parts.row_figures import scheduled
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.report import load_run, run_label
from dask_dane.pipeline.setup.config import RunConfig, read_record, read_toml, to_toml
from dask_dane.pipeline.setup.resumed import RESUMABLE_KEYS, Resume, add_resume, check_same_run
from dask_dane.pipeline.setup.run_file import saved_config

# The smallest real run: an MLP on the 2-shard digits store, 2 local steps a round.
TINY = ("--model", "mlp", "--local-steps", "2", "--batch-size", "16", "--algorithm", "fedavg")


def _cosine_lr(base: float, t: int, rounds: int, warmup: int = 0) -> float:
    """--lr-schedule cosine with --lr-warmup, written out from its definition (schedule.py)."""
    ramp = min(1.0, t / warmup) if warmup else 1.0
    return base * (1 + math.cos(math.pi * (t - 1) / rounds)) / 2 * ramp


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- Without a cluster ----------------------------------------------------------------------


def test_a_resume_that_changes_what_is_trained_is_refused_naming_the_setting():
    saved = RunConfig(store="s.zarr", local_steps=30).as_dict()

    with pytest.raises(ValueError) as refused:
        check_same_run(saved, RunConfig(store="s.zarr", local_steps=50))

    assert str(refused.value).count("\n") == 0
    assert "local_steps = 30, not 50" in str(refused.value)
    assert "local_steps" not in RESUMABLE_KEYS and "seed" not in RESUMABLE_KEYS


def test_a_resume_returns_the_allowed_changes_old_and_new():
    saved = {"store": "s.zarr", "local_lr": 0.05, "rounds": 3}  # an older file: few keys

    changes = check_same_run(saved, RunConfig(store="s.zarr", local_lr=0.1, rounds=6))

    assert changes == {"local_lr": (0.05, 0.1), "rounds": (3, 6)}


def test_config_toml_keeps_the_original_and_reads_back_as_the_settings_in_effect(tmp_path):
    original = RunConfig(store="s.zarr", local_lr=0.05, rounds=3).as_dict()
    resumes = (
        Resume(3, {"local_lr": (0.05, 0.1), "rounds": (3, 6), "scheduler": (None, "tcp://h:1")}),
        Resume(6, {"scheduler": ("tcp://h:1", None)}),  # unset again: the side is left out
    )
    path = tmp_path / "config.toml"
    path.write_text(to_toml(original, resumed=resumes))

    record, effective = read_record(path), read_toml(path)

    assert tomllib.loads(path.read_text())["solver"]["local_lr"] == 0.05
    assert record.original["local_lr"] == 0.05 and record.original["rounds"] == 3
    assert record.resumes == resumes
    assert (effective["local_lr"], effective["rounds"]) == (0.1, 6)
    assert "scheduler" not in effective


def test_a_resume_that_ran_no_round_is_folded_into_the_last_one():
    first = (Resume(3, {"local_lr": (0.05, 0.1)}),)

    again = add_resume(first, Resume(3, {"local_lr": (0.1, 0.2), "rounds": (6, 8)}))
    back = add_resume(first, Resume(3, {"local_lr": (0.1, 0.05)}))

    assert again == (Resume(3, {"local_lr": (0.05, 0.2), "rounds": (6, 8)}),)
    assert back == (Resume(3, {}),)  # no round ran at 0.1: the record does not name it


def test_the_row_rate_is_the_schedules_after_warm_up():
    strategy = RunConfig(
        algorithm="fedavg", local_lr=0.2, lr_schedule="cosine", lr_warmup=3, rounds=8
    ).strategy
    sgd = RunConfig(algorithm="sgd", local_lr=0.2, lr_schedule="cosine", rounds=8).strategy

    rates = [scheduled(strategy, t)["local_lr"] for t in range(1, 9)]
    sgd_rates = [scheduled(sgd, t)["local_lr"] for t in range(1, 9)]

    assert rates == pytest.approx([_cosine_lr(0.2, t, 8, warmup=3) for t in range(1, 9)], rel=1e-12)
    assert sgd_rates == pytest.approx([_cosine_lr(0.2, t, 8) for t in range(1, 9)], rel=1e-12)


def test_the_row_holds_k_of_the_local_steps_schedule():
    post_local = RunConfig(
        algorithm="fedavg", local_steps=5, local_steps_schedule="post-local", sync_rounds=2
    ).strategy

    steps = [scheduled(post_local, t)["scheduled_local_steps"] for t in range(1, 5)]

    assert steps == [1, 1, 5, 5]  # one step a round for --sync-rounds 2, then K


def test_the_report_labels_a_changed_setting_from_the_round_it_took_effect(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    original = RunConfig(store="/s/digits.zarr", algorithm="fedavg", local_lr=0.05).as_dict()
    resumes = (Resume(3, {"local_lr": (0.05, 0.1)}), Resume(5, {"local_lr": (0.1, 0.02)}))
    (run / "config.toml").write_text(to_toml(original, resumed=resumes))
    row = {"round": 1, "train_loss": 1.0, "test_accuracy": 0.5, "wall_s": 1.0}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")

    label = load_run(run).label

    plain = run_label(original)  # the label's other words are the algorithm's to choose
    assert plain.startswith("fedavg K=30 lr=0.05 ") and plain.endswith(" [digits]")
    assert label == plain.replace("lr=0.05", "lr=0.05 (0.1 from round 4, 0.02 from round 6)")


def _without_val_fraction(path: Path) -> None:
    """config.toml as written before the validation split existed: no val_fraction key."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if not line.startswith("val_fraction")))


def test_a_run_dir_from_before_the_split_reads_as_no_split_a_config_file_as_the_default(
    tmp_path,
):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(to_toml(RunConfig(store="s.zarr", val_fraction=0.0)))
    _without_val_fraction(run / "config.toml")

    saved = saved_config(RunDir(run))

    assert saved["val_fraction"] == 0.0  # that run trained on every row
    assert "val_fraction" not in read_toml(run / "config.toml")  # as --config: the default
    assert RunConfig().val_fraction == 0.1
    assert check_same_run(saved, RunConfig(store="s.zarr", val_fraction=0.0)) == {}
    with pytest.raises(ValueError, match=r"val_fraction = 0\.0, not 0\.1"):
        check_same_run(saved, RunConfig(store="s.zarr"))


# --- Real runs on the shared cluster --------------------------------------------------------


@pytest.fixture
def trained(digits_stores, cluster_client, tmp_path, dane_here):
    """A 2-round cosine run (lr 0.05) in tmp_path/run, and a function resuming it."""
    run = tmp_path / "run"
    scheduler = ("--scheduler", cluster_client.scheduler.address)
    first = dane_here(
        "train", str(digits_stores[2]), *TINY, *scheduler, "--rounds", "2",
        "--lr-schedule", "cosine", "--local-lr", "0.05", "--out", str(run), cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr

    def resume(*args: str):
        return dane_here("train", "--out", str(run), "--resume", *args, cwd=tmp_path)

    return run, resume


@pytest.mark.cluster
def test_a_refused_resume_is_one_line_and_leaves_the_run_untouched(trained):
    run, resume = trained
    before = {name: (run / name).read_bytes() for name in ("config.toml", "metrics.jsonl")}

    done = resume("--rounds", "3", "--local-steps", "3")

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "local_steps = 2, not 3" in done.stderr
    assert {name: (run / name).read_bytes() for name in before} == before


@pytest.mark.cluster
def test_an_allowed_change_is_recorded_and_the_rows_use_it(trained, tmp_path, dane_here):
    run, resume = trained

    faster = resume("--rounds", "4", "--local-lr", "0.1")
    longer = resume("--rounds", "5")  # reads the record back: keeps 0.1, no new lr change

    assert faster.returncode == longer.returncode == 0, faster.stderr + longer.stderr
    saved = tomllib.loads((run / "config.toml").read_text())
    assert (saved["solver"]["local_lr"], saved["run"]["rounds"]) == (0.05, 2)
    assert saved["resumed"] == [
        {"after_round": 2, "local_lr": {"old": 0.05, "new": 0.1}, "rounds": {"old": 2, "new": 4}},
        {"after_round": 4, "rounds": {"old": 4, "new": 5}},
    ]
    # Each segment spans its own --rounds (schedule.py): 2, then 4, then 5.
    expected = [_cosine_lr(0.05, 1, 2), _cosine_lr(0.05, 2, 2)]
    expected += [_cosine_lr(0.1, t, 4) for t in (3, 4)] + [_cosine_lr(0.1, 5, 5)]
    rows = _rows(run)
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["local_lr"] for r in rows] == pytest.approx(expected, rel=1e-12)
    assert [r["scheduled_local_steps"] for r in rows] == [2] * 5
    assert "K=2 lr=0.05 (0.1 from round 3) cosine" in load_run(run).label
    assert saved_config(RunDir(run))["local_lr"] == 0.1
    evaluated = dane_here("evaluate", str(run), cwd=tmp_path)
    assert evaluated.returncode == 0 and "round 5" in evaluated.stdout, evaluated.stderr
    assert dask_dane.load(run) is not None


@pytest.mark.cluster
def test_an_old_config_toml_without_a_record_still_resumes(trained):
    run, resume = trained
    settings = read_toml(run / "config.toml")
    flat = "".join(  # the flat keys older files hold, and no [[resumed]]
        f"{key} = {json.dumps(value)}\n" for key, value in settings.items()
    )
    (run / "config.toml").write_text(flat)

    done = resume("--rounds", "3")

    assert done.returncode == 0, done.stderr
    record = read_record(run / "config.toml")
    assert record.original == settings
    assert record.resumes == (Resume(2, {"rounds": (2, 3)}),)
    assert [r["round"] for r in _rows(run)] == [1, 2, 3]


@pytest.mark.cluster
def test_a_run_from_before_the_split_resumes_on_every_row(
    digits_stores, cluster_client, tmp_path, dane_here
):
    run = tmp_path / "run"
    scheduler = ("--scheduler", cluster_client.scheduler.address)
    first = dane_here(
        "train", str(digits_stores[2]), *TINY, *scheduler, "--rounds", "2",
        "--val-fraction", "0", "--out", str(run), cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    _without_val_fraction(run / "config.toml")

    done = dane_here("train", "--out", str(run), "--resume", "--rounds", "3", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    record = read_record(run / "config.toml")
    assert record.original["val_fraction"] == 0.0  # written out now that it has a default
    assert record.resumes == (Resume(2, {"rounds": (2, 3)}),)
    rows = _rows(run)
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(r["val_loss"] is None and r["val_accuracy"] is None for r in rows)


def test_the_api_refuses_a_changed_setting_in_its_keywords(digits_stores, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    saved = RunConfig(store=str(digits_stores[2]), out=str(run), local_steps=30)
    (run / "config.toml").write_text(to_toml(saved))

    with pytest.raises(ValueError) as refused:
        dask_dane.train(digits_stores[2], out=run, resume=True, local_steps=50, progress=False)

    message = str(refused.value)
    assert "local_steps = 30, not 50" in message and "resume=True" in message
    assert "--" not in message
    assert (run / "config.toml").read_text() == to_toml(saved)
