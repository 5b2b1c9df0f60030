"""The server's step on the averaged update (--server-lr, --server-lr-rule fedexp) and the
local learning rate's warm-up (--lr-warmup), against numpy (issue 25's cures).

Least squares on three 30-row shards, local steps on the whole shard (a batch of 64), no
momentum: every local solution is a line of numpy, so FedAvg's v_i, their average, FedExP's
step s and the new weights are computed independently of the project's code.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import zarr
from run_configs import BY_HAND, run_config

from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.parts.server import FEDEXP_EPSILON
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run

L2, LR, STEPS = 0.02, 0.1, 3


# numpy's steps (BY_HAND: unclipped, on every row of each shard), FedAvg's unless a test names
# another algorithm.
SETTINGS = {
    **BY_HAND, "algorithm": "fedavg", "local_lr": LR, "momentum": 0.0, "local_steps": STEPS,
    "batch_size": 64, "rounds": 1,
}  # fmt: skip


def _local_solutions(info, w: np.ndarray) -> list[np.ndarray]:
    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    solutions = []
    for a, b in info.shards:
        v = w.copy()
        for _ in range(STEPS):
            v = v - LR * (2 * x[a:b].T @ (x[a:b] @ v - y[a:b]) / (b - a) + 2 * L2 * v)
        solutions.append(v)
    return solutions


@pytest.mark.parametrize("nesterov", [False, True], ids=["heavy-ball", "nesterov"])
def test_server_momentum_is_torch_sgd_on_the_outer_gradient_over_three_rounds(
    small_least_squares, nesterov
):
    # DiLoCo's outer optimiser (Douillard et al. 2023): torch.optim.SGD on the outer
    # gradient w - mean_i v_i, here with OpenDiLoCo's lr 0.7 and momentum 0.9. The oracle is
    # torch's own optimiser, stepped on a parameter whose .grad is set by hand.
    beta, outer_lr = 0.9, 0.7
    config = dataclasses.replace(
        run_config(small_least_squares, SETTINGS, server_momentum=beta,
                   server_nesterov=nesterov, server_lr=outer_lr),
        rounds=3,
    ).validate()  # fmt: skip
    w0 = initial_weights(prepare_run(config).spec, config.seed)
    param = torch.nn.Parameter(w0.clone())
    outer = torch.optim.SGD([param], lr=outer_lr, momentum=beta, nesterov=nesterov)
    for _ in range(3):
        w = param.detach().numpy().copy()
        average = np.mean(_local_solutions(small_least_squares, w), axis=0)
        param.grad = torch.from_numpy(w - average)
        outer.step()

    run = run_reference(prepare_run(config), rounds=3, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), param.detach().numpy(), rtol=1e-12,
                               atol=1e-14)  # fmt: skip
    assert [h["server_lr"] for h in run.history] == [outer_lr] * 3


def test_nesterov_without_momentum_is_refused_naming_both_settings(small_least_squares):
    with pytest.raises(ValueError, match="--server-nesterov is a form of momentum; set "
                       "--server-momentum above 0"):  # fmt: skip
        run_config(small_least_squares, SETTINGS, server_nesterov=True)


@pytest.mark.parametrize("server_lr", [0.5, 1.7])
def test_a_fixed_server_lr_scales_the_averaged_update(small_least_squares, server_lr):
    config = run_config(small_least_squares, SETTINGS, server_lr=server_lr)
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    average = np.mean(_local_solutions(small_least_squares, w), axis=0)  # equal shards

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    expected = w + server_lr * (average - w)
    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-12, atol=1e-14)
    assert run.history[0]["server_lr"] == server_lr
    # FedAvg reports its averaged update as a gradient: (w - mean v) / (K lr).
    pseudo_gradient = np.linalg.norm(w - average) / (STEPS * LR)
    assert run.history[0]["grad_norm"] == pytest.approx(pseudo_gradient, rel=1e-12)


def test_feddyn_reports_the_training_loss_its_local_steps_start_from(small_least_squares):
    # One full-shard step's loss at w is f_i(w); the row holds their mean over the shards.
    config = run_config(small_least_squares, SETTINGS, algorithm="feddyn", mu=0.1)
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    group = zarr.open_group(small_least_squares.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    shards = small_least_squares.shards
    losses = [np.mean((x[a:b] @ w - y[a:b]) ** 2) + L2 * w @ w for a, b in shards]

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    assert run.history[0]["train_loss"] == pytest.approx(np.mean(losses), rel=1e-12)


def test_fedexp_takes_its_step_from_the_spread_of_the_local_updates(small_least_squares):
    config = run_config(small_least_squares, SETTINGS, server_lr_rule="fedexp")
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    updates = [v - w for v in _local_solutions(small_least_squares, w)]
    average = np.mean(updates, axis=0)
    spread = np.mean([u @ u for u in updates])
    scale = max(1.0, spread / (2 * (average @ average + FEDEXP_EPSILON)))

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    assert run.history[0]["server_lr"] == pytest.approx(scale, rel=1e-12)
    np.testing.assert_allclose(run.weights.numpy(), w + scale * average, rtol=1e-12, atol=1e-14)


def test_fedexp_never_steps_shorter_than_the_average():
    import torch

    from dask_dane.pipeline.algorithms.parts.server import ServerStep

    scale = ServerStep(server_lr_rule="fedexp").scale
    w = torch.zeros(3, dtype=torch.float64)
    agreeing = scale({"update_sq": 1.0}, w, torch.ones(3) / 3**0.5)
    cancelling = scale({"update_sq": 1.0}, w, torch.full((3,), 0.01))
    assert agreeing == 1.0  # identical updates: ||Delta||^2 = mean ||Delta_i||^2, s = max(1, 1/2)
    assert cancelling == pytest.approx(1.0 / (2 * (3e-4 + FEDEXP_EPSILON)))


def test_fedexp_and_a_server_lr_are_refused_together(small_least_squares):
    from dask_dane.pipeline.algorithms import SettingError

    with pytest.raises(SettingError, match="chooses the server step itself"):
        run_config(small_least_squares, SETTINGS, server_lr_rule="fedexp", server_lr=2.0)
    with pytest.raises(SettingError, match="applies to"):
        run_config(small_least_squares, SETTINGS, algorithm="sgd", server_lr=2.0)


def test_the_local_lr_warms_up_linearly_over_its_rounds():
    solver = LocalSolver(local_steps=1, local_lr=0.3, batch_size=4, lr_warmup=4, rounds=10)

    assert [solver.lr(t) for t in (1, 2, 4, 5, 10)] == pytest.approx([0.075, 0.15, 0.3, 0.3, 0.3])
    assert LocalSolver(local_steps=1, local_lr=0.3, batch_size=4).lr(1) == 0.3


@pytest.mark.parametrize("algorithm", ["dane", "fedprox"])
def test_dane_and_fedprox_scale_their_averaged_step_the_same_way(small_least_squares, algorithm):
    # Round 1's local solves start from the same w whatever the server does with them, so
    # the run with s = 1.5 lands at w + 1.5 (w_plain - w).
    common = dict(algorithm=algorithm, mu=0.2)
    plain = run_config(small_least_squares, SETTINGS, **common)
    config = run_config(small_least_squares, SETTINGS, server_lr=1.5, **common)
    unscaled = run_reference(prepare_run(plain), rounds=1, num_workers=2)
    scaled = run_reference(prepare_run(config), rounds=1, num_workers=2)

    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    expected = w + 1.5 * (unscaled.weights.numpy() - w)
    np.testing.assert_allclose(scaled.weights.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_fedexp_extrapolates_every_round_through_the_warm_up_and_the_momentum(digits_stores):
    # The rule's input travels as every shard's metrics do (sample-weighted sums in the round's
    # all-gather), and the step is taken where every algorithm's update is: the Dask = reference
    # tests of each algorithm (tests/engine/test_dask_vs_reference.py, test_torch_collective.py)
    # hold for it, so this run needs no cluster of its own.
    config = RunConfig(
        store=str(digits_stores[4]), dtype="float64", rounds=3, seed=7, mu=0.1, eta=0.3,
        local_steps=5, batch_size=16, server_lr_rule="fedexp", lr_warmup=2, server_momentum=0.5,
    ).validate()  # fmt: skip

    steps = [row["server_lr"] for row in run_reference(prepare_run(config), rounds=3,
                                                       num_workers=2).history]  # fmt: skip

    # eta 0.3 spreads the local solutions, so every round extrapolates (with the default eta
    # every step is the floor, 1.0, and a wrong update_sq would pass).
    assert all(step > 1.05 for step in steps), steps


def test_the_local_lr_is_the_product_of_its_schedule_and_its_warm_up():
    solver = LocalSolver(local_steps=1, local_lr=0.3, batch_size=4, lr_warmup=4, rounds=10,
                         lr_schedule="step")  # fmt: skip

    # Rounds 6 and 8 of 10: past the first milestone (5), the step schedule's 0.1.
    assert solver.lr(2) == pytest.approx(0.3 * 0.5)
    assert solver.lr(6) == pytest.approx(0.03) and solver.lr(8) == pytest.approx(0.003)


def test_a_stop_rule_is_asked_from_the_second_step_on():
    import torch

    from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem
    from dask_dane.pipeline.algorithms.parts.solvers import make_solver
    from dask_dane.pipeline.engine.round.objective import ShardObjective

    solver = make_solver({"local_steps": 5, "local_lr": 0.1, "batch_size": 4})
    assert isinstance(solver, LocalSolver)  # no local_solver given: K steps
    model = torch.nn.Linear(2, 1, dtype=torch.float64)
    x, y = torch.randn(8, 2, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    problem = LocalProblem(ShardObjective(model, x, y, "regression"))
    start = torch.zeros(3, dtype=torch.float64)
    asked = []

    def always_solved(grad, v) -> bool:
        asked.append(True)
        return True

    solution = solver.solve(problem, start, torch.Generator().manual_seed(0), stop=always_solved)
    assert solution.steps == 1 and len(asked) == 1  # the first step always moves


def test_dane_default_update_is_the_server_steps_plain_average():
    # DANE's default update returns mean_i v_i itself; the general rule (UpdateRule, then
    # ServerStep with s = 1 and no momentum) must give the same bits, state and metrics.
    from dask_dane.pipeline.algorithms import make_strategy
    from dask_dane.pipeline.algorithms.parts.update_rule import PLAIN_UPDATE
    from dask_dane.pipeline.engine.protocol import LocalOutput, RoundEnd

    dane = make_strategy("dane", {"mu": 0.1})
    assert dane.update_rule == PLAIN_UPDATE
    weights = torch.randn(7, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    end = RoundEnd(
        round_index=2,
        weights=weights,
        mean=LocalOutput(tensors={"weights": weights * 0.5 + 1.0}),
        broadcasts=(),
        metrics={"train_loss": 1.0},
    )
    shortcut, general = dane.update(end), PLAIN_UPDATE.update(end)
    assert torch.equal(shortcut.weights, general.weights)
    assert (shortcut.state, shortcut.metrics) == (general.state, general.metrics)
