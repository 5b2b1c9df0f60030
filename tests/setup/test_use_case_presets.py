"""The presets for a user's case (presets.RECOMMENDED): sized in passes over a shard and
fractions of its rows, never in rows or rounds of another store, so each fits any store; on
the store each was measured on they give the measured counts."""

from __future__ import annotations

import dataclasses

import pytest
from run_configs import run_config

from dask_dane import presets
from dask_dane.pipeline.algorithms.parts.local_steps_schedule import steps_for_epochs
from dask_dane.pipeline.setup.config import RunConfig, read_toml
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.store_fit import store_fit_notes

# Settings a use case must not fix: counts that mean one thing on one store (rows, steps,
# rounds of a warm-up), and what is the user's (where to write, which store, model, cluster).
STORE_SIZED = {"local_steps", "grad_sample", "lr_warmup", "server_momentum_delay", "sync_rounds",
               "local_steps_max"}  # fmt: skip
THE_USERS = {"out", "store", "model", "workers", "scheduler", "cluster", "dashboard_address"}
# Each case's measured store as (training rows, shards, validation fraction) and the K it ran.
MEASURED_K = {
    "iid-shards": ((60_000, 2, 0.0), 200),  # the race: 2 Fashion-MNIST shards, no split
    "slow-links": ((60_000, 2, 0.0), 200),  # the same race's FedAvg, on shaped links
    "skewed-shards": ((60_000, 8, 0.0), 50),  # Dirichlet 0.5 over 8 shards
    "highest-accuracy": ((60_000, 2, 0.1), 200),  # with the default validation tenth
    "many-workers": ((60_000, 8, 0.0), 15),  # 1/8 of a pass, as fashion-mnist-scale ran
}


def test_every_case_is_a_preset_with_its_measured_store():
    assert set(MEASURED_K) == set(presets.RECOMMENDED)
    shipped = {p.name: p for p in presets.list_presets()}
    assert all(shipped[name].path.parent == presets.PRESETS_DIR for name in MEASURED_K)
    # and every other settings file is a replay, beside the benchmarks' others
    others = [p for p in shipped.values() if p.name not in MEASURED_K and p.kind != "script"]
    assert others and all(p.path.parent == presets.REPLAYS_DIR for p in others)


@pytest.mark.parametrize("name", presets.RECOMMENDED)
def test_a_case_fixes_no_store_sized_count_and_nothing_of_the_users(name):
    settings = read_toml(f"preset:{name}")
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(settings) <= fields, set(settings) - fields
    assert not set(settings) & (STORE_SIZED | THE_USERS), set(settings) & (STORE_SIZED | THE_USERS)


@pytest.mark.parametrize("name", presets.RECOMMENDED)
def test_on_its_measured_store_a_case_runs_the_measured_k(name):
    settings = read_toml(f"preset:{name}")
    (rows, shards, val_fraction), measured = MEASURED_K[name]
    k = steps_for_epochs(settings["local_epochs"], rows, shards, settings["batch_size"],
                         val_fraction)  # fmt: skip
    assert k == measured


@pytest.mark.parametrize("shards", [2, 4])
@pytest.mark.parametrize("name", presets.RECOMMENDED)
def test_a_case_fits_a_small_store_with_no_note(digits_stores, name, shards):
    # digits: 1,797 images of 8 x 8, 30 times fewer rows than Fashion-MNIST: nothing to adapt.
    settings = {**read_toml(f"preset:{name}"), "rounds": 2}
    setup = prepare_run(run_config(digits_stores[shards], **settings))
    assert store_fit_notes(setup) == []
    assert setup.config.local_steps >= 1


def test_a_case_that_needs_images_on_a_store_of_rows_is_one_line_naming_the_override(
    run_cli, capfd, assert_one_line_error, tmp_path
):
    # highest-accuracy flips images; a store of 64 features a row has none to flip. The user
    # did not pass --augment: the line names the flag that overrides the preset's value.
    import dask_dane

    store = dask_dane.prepare(str(tmp_path / "rows.zarr"), "digits-tabular", shards=2)
    out = tmp_path / "run"
    status = run_cli(["train", str(store), "--config", "preset:highest-accuracy",
                      "--model", "mlp", "--dtype", "float64", "--out", str(out)])  # fmt: skip
    assert_one_line_error(status, capfd, ["--augment flips", "(64,)", "--augment none"])
    assert not out.exists()
