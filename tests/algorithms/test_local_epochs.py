"""`--local-epochs E`: K (the local steps a round) as E passes over a shard of the store's mean
size, resolved once where the run is set up, the same for `dane train`, `dask_dane.train`,
a preset and `dane bench shards`; K set twice in one place is one line."""

from __future__ import annotations

import json
import tomllib

import pytest

from dask_dane.bench.training.shards import ShardsSpec, read_config
from dask_dane.datasets.store import open_store
from dask_dane.pipeline.algorithms.parts.local_steps_schedule import steps_for_epochs
from dask_dane.pipeline.algorithms.parts.setting_error import SettingError
from dask_dane.pipeline.plan import plan_run
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run


def test_k_is_the_passes_over_a_shard_of_the_mean_size_rounded_and_at_least_one():
    assert steps_for_epochs(1.0, 60_000, 8, 64) == 117  # 7500 / 64 = 117.19
    assert steps_for_epochs(2.0, 60_000, 8, 64) == 234
    assert steps_for_epochs(0.5, 1_797, 2, 32) == 14  # 898.5 x 0.5 / 32 = 14.04
    assert steps_for_epochs(0.01, 100, 4, 64) == 1


def test_the_setup_resolves_k_on_the_store_and_builds_the_strategy_with_it(digits_stores):
    store = digits_stores[4]
    rows = round(open_store(store).num_train * 0.9)  # the default validation split held out
    expected = round(1.5 * rows / 4 / 16)
    config = plan_run({"store": str(store), "local_epochs": 1.5, "batch_size": 16})

    setup = prepare_run(config)

    assert config.local_steps == RunConfig.local_steps  # resolved by the setup, on the store
    assert setup.config.local_steps == expected and setup.config.local_epochs == 1.5
    assert setup.strategy.solver.steps(1) == expected  # the solver the rounds use
    assert prepare_run(RunConfig(store=str(store))).config.local_steps == RunConfig.local_steps


def test_k_set_twice_in_one_place_is_an_error_and_a_flag_beats_a_preset(digits_stores, tmp_path):
    store = str(digits_stores[2])
    with pytest.raises(SettingError, match="local_steps and local_epochs both set"):
        plan_run({"store": store, "local_steps": 10, "local_epochs": 1.0})
    both = tmp_path / "both.toml"
    both.write_text("local_steps = 10\nlocal_epochs = 1.0\n")
    with pytest.raises(SettingError, match="both set one count"):
        plan_run({"store": store}, file=both)

    # preset:fashion-mnist-dane-scale sets local_epochs = 1; --local-steps on the command line wins
    preset = "preset:fashion-mnist-dane-scale"
    flagged = plan_run({"store": store, "local_steps": 7}, file=preset)
    assert (flagged.local_steps, flagged.local_epochs) == (7, None)
    assert plan_run({"store": store}, file=preset).local_epochs == 1.0
    # ... and a flag's --local-epochs beats the file's local_steps
    steps_file = tmp_path / "steps.toml"
    steps_file.write_text("local_steps = 10\n")
    assert prepare_run(plan_run({"store": store, "local_epochs": 1.0}, file=steps_file)).config \
        .local_steps == steps_for_epochs(1.0, _training_rows(store), 2, 32)  # fmt: skip


def _training_rows(store) -> int:
    """The rows that train at the default --val-fraction 0.1 (a tenth held out)."""
    return round(open_store(store).num_train * 0.9)


def test_the_cli_words_the_conflict_as_flags(run_cli, capfd, assert_one_line_error, digits_stores):
    status = run_cli(["train", str(digits_stores[2]), "--local-steps", "5", "--local-epochs", "1"])
    assert_one_line_error(status, capfd, ["--local-steps and --local-epochs both set"])


def test_bench_shards_takes_the_presets_local_epochs_unless_its_flag_says_otherwise():
    preset = read_config("preset:fashion-mnist-dane-scale")
    assert preset.local_epochs == 1.0
    from_preset = ShardsSpec(run=preset).run_config(8, "s.zarr", rows=60_000)
    assert (from_preset.local_steps, from_preset.local_epochs) == (117, 1.0)
    from_flag = ShardsSpec(run=preset, local_epochs=2.0).run_config(8, "s.zarr", rows=60_000)
    # the config records the epochs its K came from, so the run's own set-up keeps that K
    assert (from_flag.local_steps, from_flag.local_epochs) == (234, 2.0)


@pytest.mark.cluster
def test_dane_train_records_the_resolved_k_and_its_rows_use_it(run_cli, digits_stores, tmp_path):
    store, out = digits_stores[2], tmp_path / "run"
    expected = steps_for_epochs(0.25, _training_rows(store), 2, 32)

    status = run_cli(["train", str(store), "--local-epochs", "0.25", "--rounds", "1",
                      "--out", str(out), "--dashboard-address", "127.0.0.1:0"])  # fmt: skip

    assert status == 0
    saved = tomllib.loads((out / "config.toml").read_text())["solver"]
    assert (saved["local_epochs"], saved["local_steps"]) == (0.25, expected)
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["scheduled_local_steps"] == expected
