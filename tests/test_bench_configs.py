"""Every TOML checked in under bench/ loads and validates: a renamed flag or a value out of
range in a published configuration fails here, not in front of a user."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dask_dane.bench.training import read_runs
from dask_dane.pipeline.config import RunConfig, read_toml

BENCH = Path(__file__).resolve().parents[1] / "bench"
TOMLS = sorted(BENCH.rglob("*.toml"))


def test_the_published_configurations_are_all_found():
    names = {path.name for path in TOMLS}
    assert {"fashion-mnist-dane-fast.toml", "fashion-mnist-dane-best.toml"} <= names
    assert "fashion-mnist-race.toml" in names


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: str(p.relative_to(BENCH)))
def test_a_checked_in_configuration_validates(path, tmp_path):
    if "run" in tomllib.loads(path.read_text()):
        runs = read_runs(path, tmp_path)
        assert len({name for name, _ in runs}) == len(runs)  # one directory per run
    else:
        config = RunConfig(**read_toml(path)).validate()
        assert config.model and config.rounds >= 1


def test_the_shipped_dane_settings_are_the_ones_documented():
    fast = RunConfig(**read_toml(BENCH / "configs" / "fashion-mnist-dane-fast.toml"))
    best = RunConfig(**read_toml(BENCH / "configs" / "fashion-mnist-dane-best.toml"))
    for config in (fast, best):
        assert (config.algorithm, config.model, config.lr_schedule) == (
            "dane", "compact-cnn", "cosine"
        )  # fmt: skip
        assert config.eval_every == 1  # shows the round it crosses the target
    assert (fast.local_steps, fast.grad_sample) == (200, 1000)
    assert (best.local_steps, best.grad_sample, best.l2) == (400, 2000, 0.00025)


def test_correction_noise_separates_the_true_correction_from_the_sampling_error(digits_stores):
    from dask_dane.bench.correction_noise import measure
    from dask_dane.pipeline.run_setup import initial_weights, prepare_run

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
