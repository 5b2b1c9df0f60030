"""--checkpoint-every N: the driver takes the weights every N rounds, at the end and for a new
best.pt; the rows still come every round, and the weights are the same bit for bit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from run_configs import run_config

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.errors import lost_message
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig, to_toml
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.settings import SettingError
from dask_dane.pipeline.training import Callbacks, train

pytestmark = pytest.mark.cluster


SETTINGS = dict(
    algorithm="fedavg",
    model="small-cnn",
    dtype="float64",
    rounds=7,
    seed=7,
    local_steps=5,
    local_lr=0.05,
    batch_size=16,
    broadcast="allgather",
    eval_every=100,  # evaluated in the last round only: no round becomes best.pt early
)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").open()]


class _Stop(Exception):
    """Stands for the driver killed after a round's row was written."""


@pytest.mark.parametrize(("every", "fetched"), [(1, [1, 2, 3, 4, 5, 6, 7]), (3, [3, 6, 7])])
def test_the_weights_come_every_n_rounds_and_at_the_end_the_rows_every_round(
    every, fetched, digits_stores, cluster_client, tmp_path
):
    config = run_config(digits_stores[2], SETTINGS, out=tmp_path / "run", checkpoint_every=every)
    seen: list[int] = []
    train(
        config, client=cluster_client, callbacks=Callbacks(on_weights=lambda t, w: seen.append(t))
    )

    assert seen == fetched
    rows = _rows(tmp_path / "run")
    assert [r["round"] for r in rows] == list(range(1, 8))
    # The rounds whose weights stayed on the cluster fetched no tensor (round 1 sends the
    # weights to every worker: the chain's start).
    by_round = {r["round"]: r["driver_bytes"] for r in rows[1:]}
    assert all((by_round[t] > 0) == (t in fetched) for t in by_round), by_round


def test_the_weights_equal_every_round_fetched_and_the_reference(
    digits_stores, cluster_client, tmp_path
):
    every = run_config(digits_stores[2], SETTINGS, out=tmp_path / "every", checkpoint_every=1)
    sparse = replace(every, out=str(tmp_path / "sparse"), checkpoint_every=3)
    train(every, client=cluster_client)
    train(sparse, client=cluster_client)
    reference = run_reference(prepare_run(sparse), rounds=7, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "sparse").latest)["weights"]
    assert torch.equal(weights, load_checkpoint(RunDir(tmp_path / "every").latest)["weights"])
    assert torch.equal(weights, reference.weights)
    losses = [r["train_loss"] for r in _rows(tmp_path / "sparse")]
    assert losses == [r["train_loss"] for r in reference.history]


def test_a_new_best_takes_its_weights_for_best_pt(digits_stores, cluster_client, tmp_path):
    every = run_config(
        digits_stores[2], SETTINGS, out=tmp_path / "every", checkpoint_every=1, eval_every=1
    )
    sparse = replace(every, out=str(tmp_path / "sparse"), checkpoint_every=100)
    train(every, client=cluster_client)
    summary = train(sparse, client=cluster_client)

    best = load_checkpoint(RunDir(tmp_path / "sparse").best)
    assert best["round"] == summary["best_round"]
    expected = load_checkpoint(RunDir(tmp_path / "every").best)
    assert best["round"] == expected["round"]
    assert torch.equal(best["weights"], expected["weights"])


def test_a_driver_killed_between_checkpoints_reruns_those_rounds_and_says_so(
    digits_stores, cluster_client, tmp_path
):
    config = run_config(digits_stores[2], SETTINGS, out=tmp_path / "run", checkpoint_every=3)
    train(replace(config, out=str(tmp_path / "ref")), client=cluster_client)

    def stop_after_5(row: dict) -> None:
        if row["round"] == 5:
            raise _Stop

    with pytest.raises(_Stop):
        train(config, client=cluster_client, callbacks=Callbacks(on_round=stop_after_5))
    run = RunDir(tmp_path / "run")
    assert load_checkpoint(run.latest)["round"] == 3  # rounds 4 and 5: rows, no checkpoint
    assert len(_rows(tmp_path / "run")) == 5

    notes: list[str] = []  # the engine's lines reach the user through Callbacks.on_note
    train(config, client=cluster_client, resume=True, callbacks=Callbacks(on_note=notes.append))
    assert any("resuming after round 3, the last checkpoint: 2 rounds" in n for n in notes)
    assert [r["round"] for r in _rows(tmp_path / "run")] == list(range(1, 8))
    reference = load_checkpoint(RunDir(tmp_path / "ref").latest)["weights"]
    assert torch.equal(load_checkpoint(run.latest)["weights"], reference)


def test_checkpoint_every_below_one_is_refused(digits_stores, tmp_path):
    with pytest.raises(SettingError, match=r"checkpoint.every"):
        run_config(digits_stores[2], SETTINGS, out=tmp_path / "run", checkpoint_every=0)


def test_a_run_stopped_by_patience_saves_the_weights_of_its_last_round(
    digits_stores, cluster_client, tmp_path
):
    # The round --patience stops at is no new best: its weights were left on the cluster,
    # and are taken there to be saved.
    every = run_config(
        digits_stores[2], SETTINGS, out=tmp_path / "every", rounds=12, eval_every=1, patience=1,
        local_lr=0.5,
    )  # fmt: skip
    sparse = replace(every, out=str(tmp_path / "sparse"), checkpoint_every=100)
    expected = train(every, client=cluster_client)
    summary = train(sparse, client=cluster_client)

    assert summary["rounds"] == expected["rounds"]
    latest = load_checkpoint(RunDir(tmp_path / "sparse").latest)
    assert latest["round"] == summary["rounds"] == len(_rows(tmp_path / "sparse"))
    reference = load_checkpoint(RunDir(tmp_path / "every").latest)["weights"]
    assert torch.equal(latest["weights"], reference)


def test_a_lost_cluster_names_the_last_checkpoint_not_the_last_row(tmp_path):
    config = RunConfig(store=str(tmp_path), out=str(tmp_path / "run"))
    line = lost_message(config, tmp_path / "run", 6, "gone", saved=3)
    assert "in round 6: gone; rounds 1-3 are saved in" in line
    assert "no checkpoint was written yet" in lost_message(config, tmp_path, 2, "x", 0)


def test_a_driver_sigkilled_between_checkpoints_loses_at_most_n_minus_1_rounds(
    digits_stores, cluster_client, tmp_path, dane_here
):
    store, out = digits_stores[2], tmp_path / "run"
    train(run_config(store, SETTINGS, out=tmp_path / "ref", rounds=9), client=cluster_client)
    saved = run_config(store, SETTINGS, out=out, rounds=9, checkpoint_every=3)
    args = ["train", "--out", str(out), "--scheduler", cluster_client.scheduler.address]
    config_file = tmp_path / "run.toml"
    config_file.write_text(to_toml(replace(saved, out=str(out))))
    driver = subprocess.Popen(
        [sys.executable, "-m", "dask_dane.cli", *args, "--config", str(config_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists() or len(_rows(out)) < 4:
            assert driver.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()

    recorded, kept = len(_rows(out)), load_checkpoint(RunDir(out).latest)["round"]
    assert kept % 3 == 0 and 0 <= recorded - kept <= 2, (recorded, kept)
    # The resume in this process: the killed driver's own process was the point above.
    resumed = dane_here("train", "--out", str(out), "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    lost = recorded - kept
    if lost:
        assert f"after round {kept}, the last checkpoint: {lost} round" in resumed.stderr
    final = load_checkpoint(RunDir(out).latest)
    assert final["round"] == 9 and [r["round"] for r in _rows(out)] == list(range(1, 10))
    reference = load_checkpoint(RunDir(tmp_path / "ref").latest)["weights"]
    assert torch.equal(final["weights"], reference)
