"""The fixes for skewed shards (issue 13), each on a case built to need it, against numpy.

- DANE's trust region: a shard whose loss is flat, so that h_i = f_i - <c_i, v> falls without
  bound along the correction c_i; the region must stop the steps on its sphere.
- FedDyn: its three update lines in numpy with exact solves on ridge regression, and its
  fixed point, which is the global minimiser where FedAvg and FedProx stop short of it.
- The local gradient clip: on the flat shard each step's gradient is -c, so the clipped
  heavy-ball recurrence can be written out by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem, LocalSolver
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run

L2 = 0.01


def _flat_shard(d: int = 3) -> ShardObjective:
    """Rows of zeros: f_i(v) = mean(y^2) whatever v is, so grad f_i = 0 everywhere."""
    x = torch.zeros(32, d, dtype=torch.float64)
    y = torch.linspace(-1.0, 1.0, 32, dtype=torch.float64)
    return ShardObjective(torch.nn.Linear(d, 1, bias=False), x, y, "regression")


def test_without_a_trust_region_the_steps_run_along_the_tilt_without_end():
    w = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    c = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64)  # ||c|| = 5
    solver = LocalSolver(local_steps=40, local_lr=0.1, batch_size=8, momentum=0.0, local_clip=0.0)

    free = solver.solve(LocalProblem(_flat_shard(), linear=c, anchor=w), w, _rng())
    bounded = solver.solve(LocalProblem(_flat_shard(), linear=c, anchor=w, radius=2.0), w, _rng())

    # grad h = -c at every v: 40 steps of 0.1 * c, a distance of 20 that more steps would grow.
    torch.testing.assert_close(free.weights, w + 40 * 0.1 * c, rtol=0, atol=1e-12)
    # Projected steps: the point of the sphere ||v - w|| = 2 furthest along c.
    torch.testing.assert_close(bounded.weights, w + 2.0 * c / 5.0, rtol=0, atol=1e-12)


def test_a_trust_region_that_is_not_reached_changes_nothing():
    objective = ShardObjective(
        torch.nn.Linear(2, 1, bias=False),
        torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64),
        torch.tensor([1.0, 1.0], dtype=torch.float64),
        "regression",
    )
    w = torch.zeros(2, dtype=torch.float64)
    solver = LocalSolver(local_steps=5, local_lr=0.05, batch_size=2, momentum=0.5)

    free = solver.solve(LocalProblem(objective, anchor=w, mu=1.0), w, _rng())
    wide = solver.solve(LocalProblem(objective, anchor=w, mu=1.0, radius=100.0), w, _rng())

    assert torch.equal(free.weights, wide.weights)
    assert 0 < float(free.weights.norm()) < 100.0


def test_dane_keeps_every_shard_within_its_trust_radius(digits_stores):
    radius = 0.05
    config = RunConfig(
        store=str(digits_stores[4]), model="small-cnn", rounds=2, seed=3, trust_radius=radius,
        diagnostics_every=1,  # the step norms are the per-shard figures
    ).validate()  # fmt: skip
    free = dataclasses.replace(config, trust_radius=0.0)

    bounded_rows = run_reference(prepare_run(config), rounds=2, num_workers=2).history
    free_rows = run_reference(prepare_run(free), rounds=2, num_workers=2).history

    bounded_steps = [s["step_norm"] for r in bounded_rows for s in r["shards"]]
    free_steps = [s["step_norm"] for r in free_rows for s in r["shards"]]
    assert min(free_steps) > 4 * radius  # the region binds: unbounded solves go further
    assert bounded_steps == pytest.approx([radius] * 8, rel=1e-5)  # on the sphere, not past it


def test_trust_radius_needs_the_step_solver():
    with pytest.raises(ValueError, match="--trust-radius bounds the local steps"):
        RunConfig(model="linear", local_solver="cg", trust_radius=1.0).validate()
    with pytest.raises(ValueError, match="applies to --algorithm dane or feddyn only"):
        RunConfig(algorithm="fedavg", trust_radius=1.0).validate()


def test_the_clip_caps_every_steps_gradient_and_momentum_follows_the_clipped_one():
    w = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    c = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64)  # ||c|| = 5
    solver = LocalSolver(local_steps=6, local_lr=0.1, batch_size=8, momentum=0.9, local_clip=2.0)

    clipped = solver.solve(LocalProblem(_flat_shard(), linear=c, anchor=w), w, _rng())

    # Heavy ball by hand: every gradient is -c, clipped to -2 c/5; buf = 0.9 buf + grad.
    v, buf = w.numpy().copy(), np.zeros(3)
    for _ in range(6):
        buf = 0.9 * buf - 2.0 * c.numpy() / 5.0
        v = v - 0.1 * buf
    np.testing.assert_allclose(clipped.weights.numpy(), v, rtol=0, atol=1e-12)


def test_a_clip_above_every_gradient_changes_nothing():
    w = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)
    c = torch.tensor([3.0, 4.0, 0.0], dtype=torch.float64)
    free = LocalSolver(local_steps=6, local_lr=0.1, batch_size=8, local_clip=0.0)
    loose = dataclasses.replace(free, local_clip=5.0 + 1e-9)

    problem = LocalProblem(_flat_shard(), linear=c, anchor=w, mu=0.5)
    assert torch.equal(
        free.solve(problem, w, _rng()).weights, loose.solve(problem, w, _rng()).weights
    )


def test_the_clip_needs_the_step_solver_and_a_norm_of_zero_or_more():
    with pytest.raises(ValueError, match="--local-clip clips the steps"):
        RunConfig(model="linear", local_solver="lbfgs", local_clip=1.0).validate()
    with pytest.raises(ValueError, match="--local-clip must be zero or positive"):
        RunConfig(local_clip=-1.0).validate()


# --- FedDyn -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def skewed_ridge(tmp_path_factory):
    """Ridge regression, d = 6, 3 shards of 40 rows drawn from three groups of rows that differ
    in scale and offset, so that the shards' minimisers differ (FedProx's bias is 14 %)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((150, 6)) * np.linspace(1.5, 0.3, 6)
    y = x @ np.linspace(1.0, -1.0, 6) + 0.3 * rng.standard_normal(150)
    x[:40] *= 2.0
    y[40:80] += 3.0
    raw = RawDataset(
        source="test-skewed-ridge",
        task="regression",
        num_classes=1,
        x_train=x[:120],
        y_train=y[:120],
        x_test=x[120:],
        y_test=y[120:],
        attrs={"l2": L2},
    )
    path = tmp_path_factory.mktemp("skewed") / "ridge.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)


def test_feddyn_takes_the_papers_three_steps(skewed_ridge, shard_quadratics, exact_setup):
    alpha = 0.5
    setup, w = exact_setup(skewed_ridge, "feddyn", mu=alpha, seed=5, local_tol=1e-13)
    parts, shares = shard_quadratics(skewed_ridge, L2)
    tilts = [np.zeros(6) for _ in parts]
    for _ in range(3):
        # v_i = argmin (1/2) v'H_i v - b_i'v - a_i'v + (alpha/2)||v - w||^2
        solutions = [
            np.linalg.solve(h + alpha * np.eye(6), b + a + alpha * w)
            for (h, b), a in zip(parts, tilts, strict=True)
        ]
        tilts = [a - alpha * (v - w) for a, v in zip(tilts, solutions, strict=True)]
        h_server = sum(p * a for p, a in zip(shares, tilts, strict=True))
        w = sum(p * v for p, v in zip(shares, solutions, strict=True)) - h_server / alpha

    run = run_reference(setup, rounds=3, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-9, atol=1e-11)
    for state, a in zip(run.shard_states, tilts, strict=True):
        np.testing.assert_allclose(state.tilt.numpy(), a, rtol=1e-9, atol=1e-11)


def test_feddyn_reaches_the_global_minimiser_where_fedprox_stops_short(
    skewed_ridge, shard_quadratics, exact_setup
):
    parts, shares = shard_quadratics(skewed_ridge, L2)
    hess = sum(p * h for (h, _), p in zip(parts, shares, strict=True))
    optimum = np.linalg.solve(hess, sum(p * b for (_, b), p in zip(parts, shares, strict=True)))
    feddyn, w0 = exact_setup(skewed_ridge, "feddyn", mu=1.0, seed=5, local_tol=1e-13)
    fedprox, _ = exact_setup(skewed_ridge, "fedprox", mu=1.0, seed=5, local_tol=1e-13)

    dyn = run_reference(feddyn, rounds=150, num_workers=2).weights.numpy()
    prox = run_reference(fedprox, rounds=150, num_workers=2).weights.numpy()

    start = np.linalg.norm(w0 - optimum)
    assert np.linalg.norm(dyn - optimum) < 1e-7 * start  # linear rate: 2e-9 measured
    assert np.linalg.norm(prox - optimum) > 0.1 * start  # FedProx's fixed point: 0.145


def test_feddyn_needs_a_positive_alpha_and_unset_takes_the_papers():
    with pytest.raises(ValueError, match="feddyn needs --mu above 0"):
        RunConfig(algorithm="feddyn", mu=0.0).validate()
    assert RunConfig(algorithm="feddyn").validate().strategy.mu == 0.01


def _rng() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# --- DANE's server-side line search -------------------------------------------------------------


def test_the_line_search_keeps_the_best_of_its_steps_along_the_averaged_step(
    skewed_ridge, shard_quadratics, exact_setup
):
    # eta = 0.3 makes every exact DANE step a third of Newton's: a step of 2 must win.
    eta = 0.3
    setup, w = exact_setup(skewed_ridge, "dane", eta=eta, line_search=4, seed=5, local_tol=1e-13)
    parts, shares = shard_quadratics(skewed_ridge, L2)
    hess = sum(p * h for (h, _), p in zip(parts, shares, strict=True))
    rhs = sum(p * b for (_, b), p in zip(parts, shares, strict=True))
    loss = lambda u: 0.5 * u @ hess @ u - rhs @ u  # noqa: E731  (F up to a constant)
    steps = []
    for _ in range(2):
        g = hess @ w - rhs
        # Exact local solves: v_i = w - eta (H_i + mu I)^-1 g with mu = 0.
        proposal = sum(
            p * (w - eta * np.linalg.solve(h, g)) for (h, _), p in zip(parts, shares, strict=True)
        )
        tried = {s: loss(w + s * (proposal - w)) for s in (2.0, 1.0, 0.5, 0.25)}
        steps.append(min(tried, key=tried.get))
        w = w + steps[-1] * (proposal - w)

    run = run_reference(setup, rounds=2, num_workers=2)

    assert steps == [2.0, 2.0]
    assert [row["line_search_step"] for row in run.history] == steps
    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-9, atol=1e-11)
    assert [row["comm_rounds"] for row in run.history] == [3, 6]  # a third phase a round


def test_the_line_search_tries_halving_steps_from_2_and_keeps_the_lowest_loss():
    from dask_dane.pipeline.algorithms.parts.update_rule import best_step, trial_steps

    assert trial_steps(4) == [2.0, 1.0, 0.5, 0.25]
    losses = {f"line_search_loss_{k}": v for k, v in enumerate([3.0, 1.5, 0.7, 0.9])}
    assert best_step(losses, 4) == (0.5, 0.7)
    tie = {f"line_search_loss_{k}": v for k, v in enumerate([1.0, 1.0, 2.0])}
    assert best_step(tie, 3) == (2.0, 1.0)  # the larger step on a tie


def test_the_line_search_refuses_what_would_choose_the_step_for_it():
    with pytest.raises(ValueError, match="--line-search chooses the step itself"):
        RunConfig(line_search=3, safeguard="backtrack").validate()
    with pytest.raises(ValueError, match="--line-search must be 0"):
        RunConfig(line_search=-1).validate()
