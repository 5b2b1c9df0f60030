"""The scaling recipe of local SGD as settings (issue: time to accuracy as workers double):
the local rate's rule in m, warm-up and delays in epochs, a server momentum that starts
late (SlowMo with alpha = 1), and DANE's gradient sample sized by the round's local rows."""

from __future__ import annotations

import math

import pytest
import torch

from dask_dane.datasets.store import open_store
from dask_dane.pipeline.algorithms import make_strategy
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.parts.local_steps_schedule import (
    local_steps_at,
    rounds_for_epochs,
)
from dask_dane.pipeline.algorithms.parts.server import ServerStep
from dask_dane.pipeline.algorithms.parts.setting_error import SettingError
from dask_dane.pipeline.engine.protocol import LocalOutput, RoundEnd
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.plan import plan_run
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run


@pytest.mark.parametrize(
    ("scaling", "reference", "factor"),
    [("none", 0, 1.0), ("sqrt", 0, math.sqrt(8)), ("linear", 0, 8.0), ("linear", 128, 4.0)],
)
def test_the_local_rate_scales_with_the_shards_combined_batch(scaling, reference, factor):
    solver = LocalSolver(
        local_lr=0.05, batch_size=64, lr_scaling=scaling, lr_reference_batch=reference, shards=8
    )
    assert solver.base_lr == pytest.approx(0.05 * factor, rel=1e-12)
    assert solver.lr(1) == pytest.approx(0.05 * factor, rel=1e-12)
    one_shard = LocalSolver(local_lr=0.05, batch_size=64, lr_scaling=scaling, shards=1)
    assert one_shard.base_lr == (0.05 if not reference else one_shard.base_lr)


def _brute_force_rounds(epochs: float, per_epoch: float, steps_at) -> int:
    rounds = 1
    while sum(steps_at(t) for t in range(1, rounds + 1)) < epochs * per_epoch - 1e-9:
        rounds += 1
    return rounds


@pytest.mark.parametrize("epochs", [0.1, 1.0, 1.5, 2.0, 3.25])
@pytest.mark.parametrize("schedule", ["constant", "post-local"])
def test_epochs_become_the_rounds_whose_local_steps_read_them(epochs, schedule):
    per_epoch = 117.1875  # 7500 rows over batch 64: one of 8 Fashion-MNIST shards

    def steps_at(t: int) -> int:
        return local_steps_at(schedule, 15, t, sync_rounds=40)

    rounds = rounds_for_epochs(epochs, per_epoch, steps_at)
    assert rounds == _brute_force_rounds(epochs, per_epoch, steps_at)
    # 1 epoch of K = 15 (1/8 of an epoch, rounded): 8 rounds; post-local: 40 of 1 step first
    if epochs == 1.0:
        assert rounds == (8 if schedule == "constant" else 40 + 6)


def test_the_setup_resolves_every_epochs_setting_on_the_store(digits_stores):
    store = digits_stores[4]
    per_epoch = round(open_store(store).num_train * 0.9) / 4 / 16  # 10 % validation held out
    config = plan_run(
        {
            "store": str(store), "algorithm": "fedavg", "batch_size": 16,
            "local_epochs": 0.125, "lr_warmup_epochs": 1.0, "server_momentum": 0.5,
            "server_momentum_delay_epochs": 0.5, "lr_scaling": "sqrt",
        }
    )  # fmt: skip
    setup = prepare_run(config)
    k = round(0.125 * per_epoch)
    assert setup.config.local_steps == k
    assert setup.config.lr_warmup == math.ceil(per_epoch / k - 1e-9)
    assert setup.config.server_momentum_delay == math.ceil(0.5 * per_epoch / k - 1e-9)
    solver = setup.strategy.solver
    assert solver.shards == 4 and solver.base_lr == pytest.approx(0.05 * 2.0)
    assert setup.strategy.server.server_momentum_delay == setup.config.server_momentum_delay


def test_a_count_and_its_epochs_in_one_place_are_refused(digits_stores):
    store = str(digits_stores[2])
    post_local = {"local_steps_schedule": "post-local"}
    for count, epochs, more in [
        ("lr_warmup", "lr_warmup_epochs", {}),
        ("sync_rounds", "sync_epochs", post_local),
        ("server_momentum_delay", "server_momentum_delay_epochs", {"server_momentum": 0.5}),
    ]:
        with pytest.raises(SettingError, match=f"{count} and {epochs} both set one count"):
            plan_run({"store": store, "algorithm": "fedavg", count: 2, epochs: 1.0, **more})


def test_a_delay_without_momentum_is_refused():
    with pytest.raises(SettingError, match="server_momentum_delay delays server_momentum"):
        ServerStep(server_momentum_delay=3)


def test_a_delayed_momentum_is_the_plain_mean_then_the_heavy_ball():
    server = ServerStep(server_momentum=0.5, server_momentum_delay=2)
    weights, state = torch.zeros(3), server.init_state(torch.zeros(3))
    steps = [torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.5, 1.0, -1.0]), torch.ones(3)]
    velocity = torch.zeros(3)
    for t, step in enumerate(steps, start=1):
        proposal = weights + step
        end = RoundEnd(round_index=t, weights=weights, mean=LocalOutput(tensors={}),
                       broadcasts=(), metrics={}, state=state)  # fmt: skip
        update = server.update(end, proposal)
        new, state = update.weights, update.state
        beta = 0.5 if t > 2 else 0.0
        velocity = beta * velocity + step  # the heavy ball, beta 0 in the delay's rounds
        if t <= 2:
            assert torch.equal(new, proposal)  # the plain mean, bit for bit
        assert torch.allclose(new, weights + velocity)
        weights = new


def test_dane_sizes_its_gradient_sample_by_the_rounds_local_rows():
    settings = {"local_steps": 4, "batch_size": 8, "grad_sample_local": 0.5}
    dane = make_strategy("dane", settings)
    assert dane._local_rows(1) == (4, 8)
    with pytest.raises(SettingError, match="give one of them"):
        make_strategy("dane", {**settings, "grad_sample": 100})


@pytest.mark.parametrize(
    ("algorithm", "settings"),
    [
        ("fedavg", dict(lr_scaling="sqrt", lr_warmup_epochs=0.5, server_momentum=0.5,
                        server_momentum_delay=1, local_epochs=0.125)),
        ("dane", dict(grad_sample_local=2.0, lr_scaling="linear", lr_reference_batch=32,
                      local_steps=3)),
        ("feddyn", dict(mu=0.01, server_momentum=0.5, server_nesterov=True, local_steps=3)),
        ("scaffold", dict(server_momentum=0.5, server_momentum_delay=1, local_steps=3,
                          server_lr_rule="fedexp")),
    ],
)  # fmt: skip
def test_the_recipe_takes_its_rate_and_sample_every_round(algorithm, settings, digits_stores):
    # The recipe's settings change each round's local rate, sample and the server's step,
    # none of what crosses or how: each algorithm's Dask = reference test holds for them
    # (tests/engine/test_dask_vs_reference.py, test_algorithm_options.py, test_torch_collective.py).
    config = RunConfig(
        store=str(digits_stores[4]), algorithm=algorithm, model="small-cnn", rounds=3, seed=3,
        batch_size=16, local_lr=0.02, **settings,
    ).validate()  # fmt: skip
    setup = prepare_run(config)
    rows = run_reference(setup, rounds=config.rounds, num_workers=2).history

    solver = setup.strategy.solver
    assert [row["local_lr"] for row in rows] == [solver.lr(t) for t in (1, 2, 3)]
    if algorithm == "dane":  # 2 x K B = 96 rows of each shard's gradient, every round
        assert all(row["grad_rows"] == 96.0 for row in rows)
