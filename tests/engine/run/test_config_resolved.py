"""config.toml holds every value the run resolved (issue 72 item 5): DANE's mu and
local_theta (well_posed.py), the local steps' clip norm and the model's l2, as the strategy
and the store filled them; a run from that config.toml alone builds the same strategy and
trains the same weights, and a run folder written before (without those keys) still resumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig, read_toml
from dask_dane.pipeline.setup.run_setup import prepare_run

RESOLVED = ("mu", "local_theta", "local_clip", "l2")


def _strategy(config_toml: Path):
    return prepare_run(RunConfig(**read_toml(config_toml)).validate()).strategy


def test_the_config_holds_what_the_strategy_resolved(digits_stores):
    given = RunConfig(store=str(digits_stores[2]), model="small-cnn", workers=2).validate()
    assert all(getattr(given, key) is None for key in RESOLVED)  # unset as given

    setup = prepare_run(given)

    strategy = setup.strategy
    assert setup.config.mu == strategy.mu and setup.config.local_theta == strategy.local_theta
    assert setup.config.local_clip == strategy.solver.clip_norm
    assert setup.config.l2 == setup.spec.l2 == setup.store.l2
    again = prepare_run(RunConfig(**setup.config.as_dict()).validate())
    assert again.strategy == strategy and again.strategy.label() == strategy.label()


@pytest.mark.cluster
def test_a_run_from_its_config_toml_alone_is_the_same_run(
    digits_stores, cluster_client, tmp_path, dane_here
):
    first, second = tmp_path / "first", tmp_path / "second"
    address = cluster_client.scheduler.address
    done = dane_here(
        "train", str(digits_stores[2]), "--model", "small-cnn", "--rounds", "2",
        "--local-steps", "3", "--out", str(first), "--scheduler", address, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (first / "config.toml").read_text()
    for key in RESOLVED:  # each written as a setting, not left for the next run to guess
        assert re.search(rf"^{key} = ", text, re.MULTILINE), (key, text)
    strategy = _strategy(first / "config.toml")
    assert strategy.mu == 0.01 and strategy.local_theta == 0.0  # well_posed.py's, for K = 3

    again = dane_here(
        "train", "--config", str(first / "config.toml"), "--out", str(second),
        "--scheduler", address, cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    rerun = _strategy(second / "config.toml")
    assert rerun == strategy and rerun.label() == strategy.label()
    assert torch.equal(RunDir(first).final_weights(), RunDir(second).final_weights())

    # A folder written before these keys were (the same file without them) resumes.
    kept = [
        line
        for line in text.splitlines()
        if not line.startswith(tuple(f"{k} = " for k in RESOLVED))
    ]
    (first / "config.toml").write_text("\n".join(kept) + "\n")
    resumed = dane_here(
        "train", "--resume", "--out", str(first), "--rounds", "3", "--scheduler", address,
        cwd=tmp_path,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert RunDir(first).rounds_recorded() == 3
