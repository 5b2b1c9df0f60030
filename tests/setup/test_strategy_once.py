"""The run's strategy is built once (setup/run_setup.py prepare_run): what it fills (mu,
local_theta, the local clip) is written into the config, and a run from that config (its
config.toml, a resume) builds an equal strategy, for every registered algorithm on a network
and on a convex model."""

from __future__ import annotations

import pytest
from run_configs import run_config

from dask_dane.datasets.store import open_store
from dask_dane.pipeline.algorithms import ALGORITHMS
from dask_dane.pipeline.setup import epochs, run_setup
from dask_dane.pipeline.setup.epochs import strategy_on_store, with_strategy_resolved

# The registered algorithms that need a setting beyond the defaults.
NEEDS = {"sdane": {"mu": 0.1}, "sdane-adaptive": {"mu": 0.1}}


def test_the_algorithms_that_need_more_are_registered():
    assert set(NEEDS) <= set(ALGORITHMS)


@pytest.mark.parametrize("model", ["mlp", "logistic"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_a_run_from_the_resolved_config_builds_an_equal_strategy(digits_stores, algorithm, model):
    config = run_config(
        digits_stores[4], algorithm=algorithm, model=model, **NEEDS.get(algorithm, {})
    )
    store = open_store(config.store)
    built = strategy_on_store(config, store)
    resolved = with_strategy_resolved(config, built, l2=1e-4)
    assert resolved.mu is not None or not hasattr(built, "mu")  # something was filled in
    assert strategy_on_store(resolved, store) == built
    # and the filled values are exactly the built strategy's
    assert {k: getattr(resolved, k) for k in ("mu", "local_theta") if hasattr(built, k)} == {
        k: getattr(built, k) for k in ("mu", "local_theta") if hasattr(built, k)
    }


def test_prepare_run_builds_the_strategy_once(digits_stores, monkeypatch):
    built = []
    make = epochs.make_strategy

    def counted(*args, **kwargs):
        built.append(args[0])
        return make(*args, **kwargs)

    monkeypatch.setattr(epochs, "make_strategy", counted)
    config = run_config(digits_stores[4], algorithm="dane", model="mlp", local_steps=7)
    setup = run_setup.prepare_run(config)
    assert built == ["dane"]
    # The config it hands on holds what the strategy filled: a resume reads them from there.
    assert (setup.config.mu, setup.config.local_theta) == (
        setup.strategy.mu,
        setup.strategy.local_theta,
    )
    assert setup.config.local_clip == setup.strategy.solver.local_clip == 1.0
