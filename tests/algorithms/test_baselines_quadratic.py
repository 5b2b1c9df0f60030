"""The paper's baselines (one-shot, ADMM, FedProx, GD, AGD) and S-DANE, SCAFFOLD and FedAvgM as
Strategies, on a small ridge quadratic: their math against numpy (single process), and ADMM's
duals through a resume on Dask. Dask runs of each on logistic regression against the reference
runner: tests/algorithms/test_baselines_logistic.py."""

from __future__ import annotations

import numpy as np
import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

L2 = 0.01


@pytest.fixture(scope="module")
def ridge(tmp_path_factory):
    """A float64 least-squares problem, d = 8, 3 shards of 40 rows, lambda = 0.01."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((140, 8)) * np.linspace(1.0, 0.2, 8)
    y = x @ np.ones(8) + 0.5 * rng.standard_normal(140)
    raw = RawDataset(
        source="test-ridge",
        task="regression",
        num_classes=1,
        x_train=x[:120],
        y_train=y[:120],
        x_test=x[120:],
        y_test=y[120:],
        attrs={"l2": L2},
    )
    path = tmp_path_factory.mktemp("ridge") / "ridge.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)


# --- the algorithms' math, single process ----------------------------------------------------


def test_one_shot_averages_each_shards_own_minimiser(ridge, shard_quadratics, exact_setup):
    setup, _ = exact_setup(ridge, "one-shot")
    parts, shares = shard_quadratics(ridge, L2)
    expected = sum(p * np.linalg.solve(h, b) for (h, b), p in zip(parts, shares, strict=True))

    run = run_reference(setup, rounds=1, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-9)


def test_fedprox_with_exact_solves_averages_the_proximal_points(
    ridge, shard_quadratics, exact_setup
):
    mu = 0.3
    setup, w0 = exact_setup(ridge, "fedprox", mu=mu)
    parts, shares = shard_quadratics(ridge, L2)
    eye = np.eye(8)
    expected = sum(
        p * np.linalg.solve(h + mu * eye, b + mu * w0)
        for (h, b), p in zip(parts, shares, strict=True)
    )

    run = run_reference(setup, rounds=1, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-9)


def test_gd_and_agd_take_the_textbook_steps(ridge, shard_quadratics, exact_setup):
    lr, beta = 0.2, 0.5
    parts, shares = shard_quadratics(ridge, L2)
    hess = sum(p * h for (h, _), p in zip(parts, shares, strict=True))
    rhs = sum(p * b for (_, b), p in zip(parts, shares, strict=True))
    grad = lambda w: hess @ w - rhs  # noqa: E731
    gd_setup, w0 = exact_setup(ridge, "gd", local_lr=lr)
    agd_setup, _ = exact_setup(ridge, "agd", local_lr=lr, momentum=beta)
    w = w0.copy()
    for _ in range(3):
        w = w - lr * grad(w)
    x_prev, y = w0.copy(), w0.copy()
    for _ in range(3):
        x = y - lr * grad(y)
        y, x_prev = x + beta * (x - x_prev), x

    gd = run_reference(gd_setup, rounds=3, num_workers=2)
    agd = run_reference(agd_setup, rounds=3, num_workers=2)

    np.testing.assert_allclose(gd.weights.numpy(), w, rtol=1e-12)
    np.testing.assert_allclose(agd.weights.numpy(), y, rtol=1e-12)  # weights carry y
    np.testing.assert_allclose(agd.state.x.numpy(), x_prev, rtol=1e-12)


def test_admm_converges_to_the_global_minimiser(ridge, shard_quadratics, exact_setup):
    # H has eigenvalues 0.09 .. 2.2; rho = 0.45 ~ sqrt(0.09 * 2.2) contracts ~0.77 per round.
    setup, _ = exact_setup(ridge, "admm", rho=0.45)
    parts, shares = shard_quadratics(ridge, L2)
    hess = sum(p * h for (h, _), p in zip(parts, shares, strict=True))
    w_star = np.linalg.solve(hess, sum(p * b for (_, b), p in zip(parts, shares, strict=True)))

    run = run_reference(setup, rounds=150, num_workers=2)

    assert np.abs(run.weights.numpy() - w_star).max() < 1e-10
    # The scaled duals sum to zero (weighted) at a consensus fixed point.
    duals = sum(p * s.dual.numpy() for s, p in zip(run.shard_states, shares, strict=True))
    assert np.abs(duals).max() < 1e-8
    assert max(np.abs(s.dual.numpy()).max() for s in run.shard_states) > 1e-3


def test_admm_first_round_is_the_proximal_average(ridge, shard_quadratics, exact_setup):
    # u_0 = 0, so round 1 solves argmin f_i + (rho/2)||x - z_0||^2, exactly FedProx's step.
    rho = 0.7
    admm, _ = exact_setup(ridge, "admm", rho=rho)
    fedprox, _ = exact_setup(ridge, "fedprox", mu=rho)

    a = run_reference(admm, rounds=1, num_workers=2)
    b = run_reference(fedprox, rounds=1, num_workers=2)

    assert (a.weights - b.weights).abs().max() < 1e-14


def _sdane_round(parts, shares, v, lam):
    """One exact S-DANE round on the quadratic shards, in numpy: (x, G, v')."""
    eye = np.eye(len(v))
    g = sum(p * (h @ v - b) for (h, b), p in zip(parts, shares, strict=True))
    xs = [v - np.linalg.solve(h + lam * eye, g) for h, _ in parts]
    grads = [h @ x - b for (h, b), x in zip(parts, xs, strict=True)]
    big_g = sum(p * gi for gi, p in zip(grads, shares, strict=True))
    return xs, grads, big_g, v - big_g / lam


def test_sdane_with_exact_solves_takes_its_closed_form_steps(ridge, shard_quadratics, exact_setup):
    lam = 0.4
    setup, v = exact_setup(ridge, "sdane", mu=lam)
    parts, shares = shard_quadratics(ridge, L2)
    for _ in range(3):
        *_, v = _sdane_round(parts, shares, v, lam)

    run = run_reference(setup, rounds=3, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), v, rtol=1e-9)


def test_adaptive_sdane_halves_lam_on_accepted_rounds_and_doubles_it_on_rejected_ones(
    ridge, shard_quadratics, exact_setup
):
    setup, v = exact_setup(ridge, "sdane-adaptive", mu=0.05)
    parts, shares = shard_quadratics(ridge, L2)
    hess = sum(p * h for (h, _), p in zip(parts, shares, strict=True))
    rhs = sum(p * b for (_, b), p in zip(parts, shares, strict=True))
    lam, rejected = 0.05, []
    for _ in range(4):
        xs, grads, big_g, stepped = _sdane_round(parts, shares, v, lam)
        x = sum(p * xi for xi, p in zip(xs, shares, strict=True))
        lhs = sum(
            p * ((gi - (h @ x - b)) @ (v - xi))
            for (h, b), gi, xi, p in zip(parts, grads, xs, shares, strict=True)
        ) + (hess @ x - rhs) @ (v - x)
        accept = lhs >= big_g @ big_g / (2 * lam)
        rejected.append(float(not accept))
        v, lam = (stepped, lam / 2) if accept else (v, 2 * lam)

    run = run_reference(setup, rounds=4, num_workers=2)

    assert [h["sdane_rejected"] for h in run.history] == rejected
    assert 0 < sum(rejected) < 4  # the test both accepts and rejects here
    assert run.state.lam == pytest.approx(lam)
    np.testing.assert_allclose(run.weights.numpy(), v, rtol=1e-8)


def test_scaffold_corrects_local_steps_with_control_variates(ridge, shard_quadratics):
    # Full-batch local gradient steps (batch >= shard), no momentum: SCAFFOLD's option II,
    # written out in numpy.
    lr, steps = 0.1, 5
    config = RunConfig(
        store=ridge.path,
        model="linear",
        dtype="float64",
        algorithm="scaffold",
        local_clip=0.0,  # numpy's steps are unclipped
        local_steps=steps,
        local_lr=lr,
        batch_size=1000,
        momentum=0.0,
        seed=2,
        val_fraction=0.0,  # numpy steps on every row of each shard
    ).validate()
    setup = prepare_run(config)
    parts, shares = shard_quadratics(ridge, L2)
    w = initial_weights(setup.spec, config.seed).numpy()
    c, c_i = np.zeros(8), [np.zeros(8) for _ in parts]
    for _ in range(3):
        ys, c_next = [], []
        for (h, b), ci in zip(parts, c_i, strict=True):
            y = w.copy()
            for _ in range(steps):
                y = y - lr * (h @ y - b - ci + c)
            ys.append(y)
            c_next.append(ci - c + (w - y) / (steps * lr))
        w = sum(p * y for y, p in zip(ys, shares, strict=True))
        c = c + sum(p * (cn - ci) for cn, ci, p in zip(c_next, c_i, shares, strict=True))
        c_i = c_next

    run = run_reference(setup, rounds=3, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-10)
    np.testing.assert_allclose(run.state.control.numpy(), c, rtol=1e-9, atol=1e-12)
    for got, expected in zip(run.shard_states, c_i, strict=True):
        np.testing.assert_allclose(got.control.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_fedavgm_is_fedavg_with_heavy_ball_momentum_on_the_server(ridge, shard_quadratics):
    # Full-batch local gradient steps, no local momentum: FedAvg's average, then the server's
    # heavy ball v <- beta v + (avg - w), w <- w + v, written out in numpy.
    lr, steps, beta = 0.1, 5, 0.7
    config = RunConfig(
        store=ridge.path,
        model="linear",
        dtype="float64",
        algorithm="fedavg",
        local_clip=0.0,  # numpy's steps are unclipped
        local_steps=steps,
        local_lr=lr,
        batch_size=1000,
        momentum=0.0,
        server_momentum=beta,
        seed=2,
        val_fraction=0.0,  # numpy steps on every row of each shard
    ).validate()
    setup = prepare_run(config)
    parts, shares = shard_quadratics(ridge, L2)
    w = initial_weights(setup.spec, config.seed).numpy()
    velocity = np.zeros(8)
    for _ in range(4):
        ys = []
        for h, b in parts:
            y = w.copy()
            for _ in range(steps):
                y = y - lr * (h @ y - b)
            ys.append(y)
        average = sum(p * y for y, p in zip(ys, shares, strict=True))
        velocity = beta * velocity + (average - w)
        w = w + velocity

    run = run_reference(setup, rounds=4, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-10)


# --- through Dask ------------------------------------------------------------------------------


@pytest.mark.cluster
def test_admm_resumes_with_its_duals(ridge, cluster_client, tmp_path):
    # The per-shard duals go into the checkpoint: 2 rounds + resume to 5 = 5 rounds straight.
    config = RunConfig(
        store=ridge.path,
        out=str(tmp_path / "run"),
        model="linear",
        dtype="float64",
        algorithm="admm",
        rho=0.5,
        local_solver="cg",
        local_tol=1e-12,
        rounds=2,
        seed=3,
    ).validate()

    train(config, client=cluster_client)
    saved = load_checkpoint(RunDir(tmp_path / "run").latest)
    from dataclasses import replace

    train(replace(config, rounds=5), resume=True, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=5, num_workers=2)

    assert len(saved["shard_states"]) == 3
    assert max(float(s["dual"].abs().max()) for s in saved["shard_states"]) > 1e-3
    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert (weights - reference.weights).abs().max() < 1e-12
