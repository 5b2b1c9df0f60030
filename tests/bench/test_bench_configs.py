"""Every TOML checked in under presets/ loads and validates: a renamed flag or a value out of
range in a published configuration fails here, not in front of a user."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from dask_dane.bench.training.train import read_runs
from dask_dane.pipeline.setup.config import RunConfig, read_toml

pytestmark = pytest.mark.bench

PRESETS = Path(__file__).resolve().parents[2] / "presets"
TOMLS = sorted(PRESETS.rglob("*.toml"))


def test_the_published_configurations_are_all_found():
    names = {path.name for path in TOMLS}
    assert {
        "fashion-mnist-dane-fast.toml", "fashion-mnist-dane-best.toml",
        "fashion-mnist-dane-k400.toml", "fashion-mnist-scale.toml", "fashion-mnist-dane-scale.toml",
    } <= names  # fmt: skip
    assert "fashion-mnist-race.toml" in names


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: str(p.relative_to(PRESETS)))
def test_a_checked_in_configuration_validates(path, tmp_path):
    if "run" in tomllib.loads(path.read_text()):
        runs = read_runs(path, tmp_path)
        assert len({name for name, _ in runs}) == len(runs)  # one directory per run
    else:
        config = RunConfig(**read_toml(path)).validate()
        assert config.model and config.rounds >= 1


def test_the_shipped_dane_settings_are_the_ones_documented():
    fast = RunConfig(**read_toml("preset:fashion-mnist-dane-fast"))
    best = RunConfig(**read_toml("preset:fashion-mnist-dane-best"))
    for config in (fast, best):
        assert (config.algorithm, config.model, config.lr_schedule) == (
            "dane", "compact-cnn", "cosine"
        )  # fmt: skip
        assert config.eval_every == 1  # shows the round it crosses the target
    assert (fast.local_steps, fast.grad_sample, fast.correction) == (200, 1000, "shrink")
    assert best.correction == "plain"  # measured before the shrunk correction existed
    scale = RunConfig(**read_toml("preset:fashion-mnist-dane-scale"))
    assert (scale.correction, scale.grad_sample, scale.rounds) == ("shrink", 1000, 10)
    assert scale.server_lr_rule == "fedexp"  # measured at m = 8: +0.89 points over shrink alone
    assert (best.local_steps, best.grad_sample, best.l2) == (200, 4000, 0.00025)
    assert (best.augment, best.rounds) == ("flip", 70)
    k400 = RunConfig(**read_toml("preset:fashion-mnist-dane-k400"))
    assert (k400.local_steps, k400.grad_sample, k400.rounds, k400.augment) == (400, 2000, 16, "")


def test_the_scaling_preset_is_the_recipe_the_m8_sweep_chose():
    """docs/results/scaling-recipe/win.toml, the sweep's winner as measured, minus the comment."""
    from pathlib import Path

    shipped = read_toml("preset:fashion-mnist-scale")
    measured = read_toml(Path(__file__).parents[2] / "docs/results/scaling-recipe/win.toml")
    assert shipped == measured
    scale = RunConfig(**shipped)
    assert (scale.algorithm, scale.lr_scaling, scale.server_momentum) == ("fedavg", "sqrt", 0.5)
    assert (scale.local_epochs, scale.lr_warmup_epochs, scale.rounds) == (0.125, 1.0, 40)


@pytest.mark.cluster
def test_the_skew_settings_train_on_a_skewed_store_they_were_not_tuned_on(tmp_path, dane_here):
    from dask_dane.datasets.partition import PartitionSpec
    from dask_dane.datasets.sources import SourceOptions, load_source
    from dask_dane.datasets.store import write_store

    store = tmp_path / "digits-skew.zarr"  # digits, 4 shards of 3 classes: not Fashion-MNIST
    spec = PartitionSpec(num_shards=4, seed=0, kind="label-skew", classes_per_shard=3)
    write_store(load_source("digits", SourceOptions(seed=0)), spec, store, force=False)
    out = tmp_path / "run"

    done = dane_here(
        "train", str(store), "--config", "preset:skew-dane", "--model", "small-cnn",
        "--workers", "2", "--rounds", "3", "--out", str(out), "--dashboard-address", "127.0.0.1:0",
        cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert [(r["algorithm"], r["comm_rounds"]) for r in rows] == [("feddyn", c) for c in (1, 2, 3)]
    assert rows[-1]["test_accuracy"] > 0.5  # 10 classes; no shard holds more than 3


def test_correction_noise_separates_the_true_correction_from_the_sampling_error(digits_stores):
    from dask_dane.bench.training.correction_noise import measure
    from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run

    config = RunConfig(store=str(digits_stores[2]), model="small-cnn").validate()
    weights = initial_weights(prepare_run(config).spec, 0)

    whole = measure(config, weights, sample=10_000, draws=2)  # the sample covers each shard
    tiny = measure(config, weights, sample=20, draws=3)

    assert whole["grad_norm"] > 0
    for shard in whole["shards"]:
        assert shard["sampling_error_norm"] == pytest.approx(0, abs=1e-6)
        assert shard["sampled_correction_norm"] == pytest.approx(shard["correction_norm"])
    # Two shards: c_1 = -c_2, so both have the same norm.
    assert whole["shards"][0]["correction_norm"] == pytest.approx(
        whole["shards"][1]["correction_norm"], rel=1e-5
    )
    # 20 rows of ~700: the sampled correction is mostly error, larger than the true one.
    for shard, exact in zip(tiny["shards"], whole["shards"], strict=True):
        assert shard["sampling_error_norm"] > exact["correction_norm"]


def test_each_split_seed_of_the_shards_sweep_has_its_own_store():
    """A store written before is reused, so a second split seed must not find the first's."""
    from dask_dane.bench.training.shards import store_name

    assert store_name("fashion-mnist", 8, 0) == "fashion-mnist-iid-8.zarr"  # as always
    assert len({store_name("fashion-mnist", 8, seed) for seed in (0, 1, 2)}) == 3
