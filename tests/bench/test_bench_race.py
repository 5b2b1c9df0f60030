"""`dane bench single` and the race of `dane bench ddp` with a --runs file: every method on the
same shards, targets reached in order, the single process as the no-communication row."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from traceback import format_exception

import pytest
from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.models.registry import ModelSpec, build_model

pytestmark = pytest.mark.bench


def test_single_process_trains_the_same_model_and_reports_each_target(digits_stores, tmp_path):
    out = tmp_path / "single.json"

    done = CliRunner().invoke(
        app,
        ["bench", "single", "--store", str(digits_stores[2]), "--model", "small-cnn",
         "--epochs", "1", "--batch-size", "32", "--eval-every", "10", "--target", "0.5",
         "--target", "0.9", "--threads", "1", "--json", str(out),
         "--plot", str(tmp_path / "s.png")],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())
    assert result["steps"] == result["steps_per_epoch"] == result["rows"] // 32
    curve = result["curve"]
    assert [p["images"] for p in curve] == [p["step"] * 32 for p in curve]
    assert curve[-1]["test_accuracy"] > curve[0]["test_accuracy"] + 0.3  # it learned
    half = result["to_target"]["0.5"]
    first = next(p for p in curve if p["test_accuracy"] >= 0.5)
    assert half["step"] == first["step"] and half["images"] == first["images"]
    assert (tmp_path / "s.png").stat().st_size > 10_000


@pytest.mark.cluster
def test_the_race_runs_ddp_one_process_and_every_listed_run(digits_stores, tmp_path):
    runs = tmp_path / "runs.toml"
    runs.write_text(
        "[defaults]\nrounds = 3\nlocal_steps = 4\n\n"
        '[[run]]\nname = "dane-fast"\nalgorithm = "dane"\ngrad_sample = 50\n\n'
        '[[run]]\nname = "scaffold"\nalgorithm = "scaffold"\nmomentum = 0.0\n'
    )

    done = CliRunner().invoke(
        app,
        ["bench", "ddp", "--store", str(digits_stores[2]), "--model", "small-cnn",
         "--workers", "2", "--epochs", "0.5", "--batch-size", "16", "--eval-every", "5",
         "--runs", str(runs), "--target", "0.3", "--target", "0.6", "--no-single",
         "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "race.json"),
         "--network", "1,0.5"],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads((tmp_path / "race.json").read_text())
    assert list(result["methods"]) == ["ddp", "dane-fast", "scaffold"]
    assert result["targets"] == [0.3, 0.6]
    dane = result["methods"]["dane-fast"]
    assert dane["config"]["grad_sample"] == 50 and dane["config"]["rounds"] == 3
    assert dane["config"]["local_lr"] == 0.05 and dane["config"]["batch_size"] == 16  # DDP's
    assert [p["comm_rounds"] for p in dane["curve"]] == [2, 4, 6]
    scaffold = result["methods"]["scaffold"]
    # SCAFFOLD moves twice FedAvg's bytes. The all-gather form (2 workers): each worker
    # sends its solution and its control update to the other, 2 x 2 copies.
    assert scaffold["bytes_per_round"] == 2 * 2 * result["ddp_raw"]["model_bytes"]
    for method in result["methods"].values():
        reached = method["to_target"]
        if reached["0.3"] and reached["0.6"]:
            assert reached["0.3"]["images"] <= reached["0.6"]["images"]
    assert "| dask-dane scaffold |" in done.output


@pytest.mark.cluster
def test_shards_bench_runs_one_configuration_on_every_split(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(
        'model = "small-cnn"\nrounds = 3\nlocal_steps = 5\nworkers = 2\n'
        'dashboard_address = "127.0.0.1:0"\n'
    )

    done = CliRunner().invoke(
        app,
        ["bench", "shards", "--config", str(config), "--source", "digits", "--shards", "1,2,4",
         "--target", "0.5", "--workdir", str(tmp_path / "work"), "--fedavg",
         "--json", str(tmp_path / "shards.json"), "--plot", str(tmp_path / "shards.png")],
    )  # fmt: skip

    assert done.exit_code == 0, done.output + "".join(format_exception(*done.exc_info))
    result = json.loads((tmp_path / "shards.json").read_text())
    assert [r["shards"] for r in result["runs"]] == [1, 2, 4]
    for run in result["runs"]:
        assert len(run["curve"]) == 3  # the same iteration budget on every split
        store = run["config"]["store"]
        assert store.endswith(f"digits-iid-{run['shards']}.zarr")
        assert 0.1 < run["final_test_accuracy"] <= run["best_test_accuracy"] <= 1
        if run["rounds_to_target"] is not None:
            first = next(p for p in run["curve"] if p["test_accuracy"] >= 0.5)
            assert run["rounds_to_target"] == first["round"]
    # m shards run m local solves of 5 steps an iteration: the images grow with m.
    images = [r["curve"][-1]["images"] for r in result["runs"]]
    assert images[0] < images[1] < images[2]
    assert (tmp_path / "shards.png").stat().st_size > 10_000
    # Beside each m: FedAvg with the same settings, and DDP at m ranks with Goyal et al.'s
    # rule (batch m x 32, lr m x 0.05, a warm-up of one epoch where m > 1) at DANE's budget
    # of local epochs: 3 rounds x 5 steps x 32 rows x m over the training rows.
    assert [r["config"]["algorithm"] for r in result["fedavg_runs"]] == ["fedavg"] * 3
    ddp = result["ddp_runs"]
    assert [(r["shards"], r["global_batch"], r["warmup_epochs"]) for r in ddp] == [
        (1, 32, 0.0), (2, 64, 1.0), (4, 128, 1.0)
    ]  # fmt: skip
    assert [r["lr"] for r in ddp] == pytest.approx([0.05, 0.1, 0.2])
    for run in ddp:
        local_images = 3 * 5 * 32 * run["shards"]  # what DANE's local steps read
        assert run["epochs"] == pytest.approx(local_images / run["train_rows"])
        assert run["steps"] * run["global_batch"] == pytest.approx(local_images, rel=0.1)
        assert 0.1 < run["final_test_accuracy"] <= run["best_test_accuracy"] <= 1
    assert "DDP at m ranks" in done.output and "FedAvg, the same local settings" in done.output
    # What `dane bench time-to-accuracy` projects from: each round's timing, DDP's bytes.
    for run in result["runs"]:
        timing = run["timing"]
        assert timing["workers"] == min(run["shards"], 2) and timing["phases"] == 2
        assert len(timing["round_compute_s"]) == len(timing["round_train_s"]) == 3
        # Rounds are pipelined (2 in flight), so a round's row-to-row time can be shorter
        # than its compute; over the run, each worker computes one task at a time.
        assert all(compute > 0 for compute in timing["round_compute_s"])
        assert sum(timing["round_train_s"]) > 0
        # The all-gather form (a gloo group's, the default collective): one worker moves
        # nothing, two send their sums both ways.
        assert timing["round_form"] == "torch"
        assert all((b > 0) == (timing["workers"] > 1) for b in timing["comm_bytes"])
    small_cnn = build_model(ModelSpec(name="small-cnn", sample_shape=(1, 8, 8), num_classes=10))
    params = sum(p.numel() for p in small_cnn.parameters())
    for run in ddp:
        assert run["grad_bytes"] == 4 * params  # float32 gradients, all-reduced each step


def test_shards_bench_refuses_a_config_that_names_a_store(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('store = "data/x.zarr"\n')

    done = CliRunner().invoke(app, ["bench", "shards", "--config", str(config)])

    assert done.exit_code != 0
    assert "names a store" in str(done.exception)


def test_shards_bench_local_epochs_sets_the_steps_that_pass_once_over_a_shard(tmp_path):
    from dask_dane.bench.training.shards import ShardsSpec, read_config

    config = tmp_path / "run.toml"
    config.write_text('model = "small-cnn"\nlocal_steps = 5\nbatch_size = 32\n')
    run = read_config(config)
    spec = ShardsSpec(run=run, local_epochs=2.0).validate()

    # 6400 rows over m shards, 2 passes of batches of 32: 400 / m steps.
    steps = [spec.run_config(m, "x.zarr", rows=6400).local_steps for m in (1, 2, 4, 8)]
    assert steps == [400, 200, 100, 50]
    assert ShardsSpec(run=run).run_config(4, "x.zarr", rows=6400).local_steps == 5
    with pytest.raises(ValueError, match="--local-epochs"):
        ShardsSpec(run=run, local_epochs=0.0).validate()


def test_ddp_rows_warm_up_linearly_to_the_scaled_lr_and_then_follow_the_schedule():
    from dask_dane.bench.ddp.single import SingleSpec, step_lr

    spec = SingleSpec(store="x.zarr", lr=0.4, warmup_epochs=2.0, warmup_lr=0.1,
                      lr_schedule="cosine")  # fmt: skip
    per_epoch, steps = 10, 100  # the warm-up: the first 20 steps

    def cosine(step: int) -> float:
        return 0.4 * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))

    for step in (1, 10, 19):
        expected = 0.1 + (cosine(step) - 0.1) * step / 20
        assert step_lr(spec, step, steps, per_epoch) == pytest.approx(expected, rel=1e-12)
    for step in (20, 60, 100):
        assert step_lr(spec, step, steps, per_epoch) == pytest.approx(cosine(step), rel=1e-12)
    assert step_lr(replace(spec, warmup_epochs=0.0), 1, steps, per_epoch) == pytest.approx(0.4)


def test_shards_bench_runs_the_ddp_rows_alone_without_a_cluster(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('model = "small-cnn"\nrounds = 2\nlocal_steps = 5\nworkers = 2\n')
    common = ["bench", "shards", "--config", str(config), "--source", "digits", "--shards", "1,2"]
    common += ["--workdir", str(tmp_path / "work")]

    ddp_alone = [*common, "--no-dane", "--ddp-threads", "1", "--json", str(tmp_path / "ddp.json")]
    done = CliRunner().invoke(app, ddp_alone)

    assert done.exit_code == 0, done.output
    result = json.loads((tmp_path / "ddp.json").read_text())
    assert result["runs"] == [] and [r["shards"] for r in result["ddp_runs"]] == [1, 2]
    assert [r["threads"] for r in result["ddp_runs"]] == [1, 1]
    assert not (tmp_path / "work" / "runs").exists()  # no dask-dane run was started
    nothing = CliRunner().invoke(app, [*common, "--no-dane", "--no-ddp"])
    assert nothing.exit_code != 0 and "leaves nothing to run" in str(nothing.exception)


def test_the_ddp_grid_scales_the_lr_as_its_users_do_and_keeps_the_lowest_training_loss(
    monkeypatch,
):
    # Issue 34: at large m, DDP's row is the best of 2 scalings x 2 warm-ups x 3 lr factors,
    # chosen by the final training loss (the test split stays out of the choice).
    import dask_dane.bench.training.ddp_rows as ddp_rows
    from dask_dane.pipeline.setup.config import RunConfig

    config = RunConfig(store="x.zarr", local_lr=0.05, batch_size=32, rounds=10, local_steps=5)
    settings = ddp_rows.grid_settings()
    assert len(settings) == 12
    sqrt = ddp_rows.ddp_spec(config, 16, 2.0, 6400, scaling="sqrt", warmup=5.0, lr_factor=2.0)
    assert (sqrt.lr, sqrt.warmup_epochs, sqrt.batch_size) == (pytest.approx(0.4), 5.0, 512)
    linear = ddp_rows.ddp_spec(config, 16, 2.0, 6400, lr_factor=0.5)
    assert (linear.lr, linear.warmup_epochs) == (pytest.approx(0.4), 1.0)  # 16 x 0.05 / 2

    # Made-up runs: the loss is lowest at sqrt scaling, 5 epochs, x1; the linear x2 runs
    # diverge (nan), and their test accuracy, the highest here, must not win.
    def fake_run(spec, log):
        scaling = "sqrt" if spec.lr < 16 * 0.05 * 0.5 - 1e-9 else "linear"
        diverged = scaling == "linear" and spec.lr > 16 * 0.05 * 1.5
        loss = float("nan") if diverged else abs(spec.lr - 0.2) + 0.1 / spec.warmup_epochs
        accuracy = 0.99 if diverged else 0.9 - loss
        curve = [{"step": 10, "train_loss": loss, "test_accuracy": accuracy, "images": 5120}]
        return {"curve": curve, "final_test_accuracy": accuracy, "best_test_accuracy": accuracy,
                "steps": 10, "train_wall_s": 1.0, "threads": 1, "model_params": 10}  # fmt: skip

    monkeypatch.setattr(ddp_rows, "run_single", fake_run)
    row = ddp_rows.ddp_row(config, 16, 6400, 0.5, log=lambda line: None, grid=True)

    assert row["setting"] == {"scaling": "sqrt", "warmup": 5.0, "lr_factor": 1.0}
    assert row["lr"] == pytest.approx(0.2) and row["warmup_epochs"] == 5.0
    assert len(row["grid"]) == 12
    assert sorted(r["final_train_loss"] for r in row["grid"])[-2:] == [float("inf")] * 2
    plain = ddp_rows.ddp_row(config, 16, 6400, 0.5, log=lambda line: None)
    assert "grid" not in plain and plain["lr"] == pytest.approx(0.8)  # Goyal et al.'s rule
