"""A run planned once: `dane train` reads the store once and builds the strategy twice (once
to check the settings before anything is written, then the run's own on the store, whose
shards decide DANE's unset mu; what it filled is written into the settings, from which a rerun
from config.toml builds an equal one: tests/setup/test_strategy_once.py), and the setup it made
is the one the engine runs; the collapse warning names the run's own mu."""

from __future__ import annotations

from collections import Counter

import pytest

from dask_dane.pipeline.algorithms import make_strategy
from dask_dane.pipeline.observe.collapse import advice
from dask_dane.pipeline.setup.config import RunConfig

# The modules that build strategies or open stores on the way to the first round.
BUILDERS = ("dask_dane.pipeline.setup.config", "dask_dane.pipeline.setup.epochs")
OPENERS = ("dask_dane.pipeline.setup.run_setup", "dask_dane.pipeline.launchers.worker_count")


@pytest.fixture
def counted(monkeypatch) -> tuple[Counter, list]:
    """Strategy builds and store opens counted, and the engine's train faked: what it got."""
    import importlib

    from dask_dane.datasets.store import open_store

    calls: Counter = Counter()
    handed: list = []

    def build(*args, **kwargs):
        calls["strategy built"] += 1
        return make_strategy(*args, **kwargs)

    def open_counted(*args, **kwargs):
        calls["store opened"] += 1
        return open_store(*args, **kwargs)

    for name in BUILDERS:
        monkeypatch.setattr(importlib.import_module(name), "make_strategy", build)
    for name in OPENERS:
        module = importlib.import_module(name)
        if hasattr(module, "open_store"):
            monkeypatch.setattr(module, "open_store", open_counted)

    def fake_train(config, **given):
        handed.append(given.get("setup"))
        return {"algorithm": config.algorithm, "rounds": 0, "final_test_accuracy": None}

    monkeypatch.setattr("dask_dane.pipeline.training.train", fake_train)
    return calls, handed


@pytest.mark.parametrize("epochs", [[], ["--local-epochs", "1"]], ids=["steps", "epochs"])
def test_train_reads_the_store_once_and_builds_the_strategy_twice(
    epochs, counted, dane_here, digits_stores, tmp_path
):
    calls, handed = counted
    store = [str(digits_stores[2]), "--workers", "2"]
    done = dane_here("train", *store, *epochs, "--out", str(tmp_path / "run"), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert calls == {"strategy built": 2, "store opened": 1}
    (setup,) = handed
    assert setup is not None and setup.store.num_shards == 2  # the engine plans nothing again


def test_the_collapse_advice_names_the_run_s_own_mu():
    config = RunConfig(algorithm="dane", local_steps=300)  # mu unset: resolved on the store
    run_strategy = make_strategy("dane", {**config.strategy_settings(), "mu": 2.5})

    assert "raise --mu (now 2.5)" in advice(config, run_strategy)


def test_the_collapse_advice_names_k_as_given_in_passes_and_as_the_run_resolved_it(
    digits_stores,
):
    # The settings say 0.5 passes; the run's K is what the store's shards make of them
    # (the settings' own local_steps, 30 by default, is not the run's).
    from dask_dane.pipeline.setup.run_setup import prepare_run

    config = RunConfig(store=str(digits_stores[2]), algorithm="fedavg", local_epochs=0.5)
    setup = prepare_run(config.validate())
    k = setup.strategy.solver.local_steps
    assert k != config.local_steps
    assert advice(config, setup.strategy).startswith(
        f"lower --local-epochs (now 0.5, K = {k} steps) or --local-lr"
    )
    given = RunConfig(algorithm="fedavg", local_steps=7)
    assert advice(given).startswith("lower --local-steps (now 7) or --local-lr")
