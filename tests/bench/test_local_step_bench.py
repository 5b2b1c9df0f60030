"""`dane bench local-step`: the worker's local step and a plain PyTorch loop train the same
thing, and the command gives both timings and their ratio; checked for what must hold, never
for how fast either is."""

from __future__ import annotations

import json

import pytest
import torch

from dask_dane.bench.local_step.run import LocalStepSpec, engine_loop, plain_loop, summary
from dask_dane.pipeline.engine.run.run_state import RunState
from dask_dane.pipeline.setup.run_setup import prepare_run

pytestmark = pytest.mark.bench


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (["--steps", "0"], ["--steps must be at least 1"]),
        (["--repeats", "0"], ["--repeats must be at least 1"]),
        (["--threads", "0"], ["--threads must be at least 1"]),
        (["--optimizer", "rmsprop"], ["--optimizer is one of sgd-momentum, sgd, adam"]),
        (["--lr", "0"], ["--lr must be above 0"]),
    ],
)
def test_bad_input_is_exit_2_and_one_line_and_writes_nothing(
    flags, fragments, run_cli, capfd, assert_one_line_error, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)

    status = run_cli(["bench", "local-step", *flags, "--json", "out.json"])

    assert_one_line_error(status, capfd, fragments)
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "bench-out").exists()


def test_a_store_that_is_not_there_is_exit_2_and_one_line(
    run_cli, capfd, assert_one_line_error, tmp_path
):
    status = run_cli(["bench", "local-step", "--store", str(tmp_path / "none.zarr")])

    assert_one_line_error(status, capfd, ["none.zarr"])


@pytest.mark.parametrize(
    ("optimizer", "clip"), [("sgd-momentum", 0.0), ("sgd-momentum", 0.5), ("adam", 0.0)]
)
def test_the_engine_and_the_plain_loop_end_on_the_same_weights(digits_stores, optimizer, clip):
    spec = LocalStepSpec(
        store=str(digits_stores[2]), model="small-cnn", batch_size=16, steps=6,
        optimizer=optimizer, lr=0.05, clip=clip,
    ).validate()  # fmt: skip
    setup = prepare_run(spec.run_config())
    state, shard = RunState.fresh(setup), setup.load_train(0)

    engine = engine_loop(setup, state, shard)()
    plain = plain_loop(setup, state, shard, spec)()

    # Bit for bit: the same rows in the same order, the same optimizer, the same clip.
    assert torch.equal(engine, plain)
    assert not torch.equal(engine, state.weights)  # and they did train
    assert torch.equal(plain_loop(setup, state, shard, spec)(), plain)  # each run from w_0


def test_a_tiny_run_gives_both_timings_their_ratio_and_the_profile(
    digits_stores, run_cli, capfd, tmp_path
):
    out, figure = tmp_path / "local-step.json", tmp_path / "local-step.png"
    flags = ["--store", str(digits_stores[2]), "--model", "small-cnn", "--steps", "3"]

    status = run_cli(["bench", "local-step", *flags, "--batch-size", "8", "--repeats", "2",
                      "--json", str(out), "--plot", str(figure)])  # fmt: skip

    assert status == 0, capfd.readouterr().err
    result = json.loads(out.read_text())
    engine, plain = (result["loops"][name] for name in ("engine", "plain"))
    assert len(engine["runs_ms_per_row"]) == len(plain["runs_ms_per_row"]) == 2
    assert engine["ms_per_row"] > 0 and plain["ms_per_row"] > 0
    assert result["ratio"] == pytest.approx(engine["ms_per_row"] / plain["ms_per_row"])
    assert result["rows_per_run"] == 3 * 8
    assert result["weights"]["identical"] and result["weights"]["max_abs_diff"] == 0.0
    top = result["profile"]["top"]
    assert top and all(row["calls"] >= 1 and row["own_s"] >= 0 for row in top)
    assert 0 < result["profile"]["dask_dane_share"] < 1
    # What the engine adds: its sampling, a permutation a step (the plain loop's rows were
    # drawn before it ran).
    added = {row["function"]: row for row in result["profile"]["added"]}
    assert added["<built-in method torch.randperm>"]["engine_calls"] == 3
    assert added["<built-in method torch.randperm>"]["plain_calls"] == 0
    assert figure.stat().st_size > 0
    assert "engine / plain" in capfd.readouterr().out


def test_the_summary_is_the_median_run_a_row_and_the_ratio_of_the_medians():
    spec = LocalStepSpec(store="s", steps=10, batch_size=10, repeats=3)
    seconds = {"engine": [0.3, 0.1, 0.2], "plain": [0.2, 0.2, 0.1]}
    weights = {"engine": torch.ones(3), "plain": torch.tensor([1.0, 1.0, 1.5])}

    result = summary(spec, "digits", 100, seconds, weights, {"top": []})

    assert result["loops"]["engine"]["ms_per_row"] == pytest.approx(2.0)  # 0.2 s / 100 rows
    assert result["loops"]["plain"]["ms_per_row"] == pytest.approx(2.0)
    assert result["loops"]["engine"]["best_ms_per_row"] == pytest.approx(1.0)  # 0.1 s
    assert result["best_ratio"] == pytest.approx(1.0)
    assert result["repeat_ratios"] == pytest.approx([1.5, 0.5, 2.0])
    assert not result["weights"]["identical"]
    assert result["weights"]["max_abs_diff"] == pytest.approx(0.5)
