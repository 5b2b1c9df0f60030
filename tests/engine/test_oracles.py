"""Independent oracles (issue 15): DANE and its gradient sample computed by hand in numpy,
never through the project's objective or solver, against the single-process reference.

The model is least squares on a float64 store, so every loss and gradient is a line of
numpy: f_i(v) = mean_rows (x v - y)^2 + lambda ||v||^2, grad = 2 X'(X v - y)/n + 2 lambda v.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr
from run_configs import BY_HAND, run_config

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run

L2 = 0.02


def _least_squares_raw() -> RawDataset:
    """d = 5, 90 training rows, float64."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((110, 5)) * np.array([1.5, 1.0, 0.7, 0.4, 0.2])
    y = x @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.4 * rng.standard_normal(110)
    return RawDataset(
        source="test-least-squares",
        task="regression",
        num_classes=1,
        x_train=x[:90],
        y_train=y[:90],
        x_test=x[90:],
        y_test=y[90:],
        attrs={"l2": L2},
    )


@pytest.fixture(scope="module")
def least_squares(tmp_path_factory):
    """The rows above in 3 shards of 30."""
    path = tmp_path_factory.mktemp("oracle") / "ls.zarr"
    return write_store(_least_squares_raw(), PartitionSpec(num_shards=3, seed=0), path, force=False)


def _shards(info) -> list[tuple[np.ndarray, np.ndarray]]:
    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    return [(x[a:b], y[a:b]) for a, b in info.shards]


def _grad(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
    return 2 * x.T @ (x @ v - y) / len(x) + 2 * L2 * v


def test_two_dane_iterations_with_three_momentum_steps_match_the_hand_computation(
    least_squares,
):
    # A minibatch of 64 covers a 30-row shard, so every local step is a full-shard step and
    # the hand computation needs no sampling.
    eta, mu, lr, beta, steps = 0.8, 0.3, 0.1, 0.9, 3
    config = run_config(
        least_squares, BY_HAND, eta=eta, mu=mu, local_lr=lr, momentum=beta, local_steps=steps,
        batch_size=64, rounds=2,
    )  # fmt: skip
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    shards = _shards(least_squares)
    sizes = np.array([len(x) for x, _ in shards], dtype=float)
    shares = sizes / sizes.sum()

    for _ in range(2):
        local_grads = [_grad(x, y, w) for x, y in shards]
        g = sum(p * gi for p, gi in zip(shares, local_grads, strict=True))
        solutions = []
        for (x, y), gi in zip(shards, local_grads, strict=True):
            v, buf = w.copy(), None
            for _ in range(steps):  # torch's SGD: buf = grad, then beta * buf + grad
                grad_h = _grad(x, y, v) - (gi - eta * g) + mu * (v - w)
                buf = grad_h if buf is None else beta * buf + grad_h
                v = v - lr * buf
            solutions.append(v)
        w = sum(p * v for p, v in zip(shares, solutions, strict=True))

    run = run_reference(prepare_run(config), rounds=2, num_workers=2)

    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-12, atol=1e-14)


def test_the_gradient_sample_is_the_same_rows_every_round_and_their_gradient(least_squares):
    # --grad-sample 12 of each 30-row shard: f_i and g_i on 12 rows, the rows fixed by the
    # documented rule (the first 12 of one permutation drawn from the run's seed, sorted),
    # the same in both rounds. One full-shard local step (K = 1, no momentum) then moves
    # v_i = w - lr (grad f_i(w) - g_i + g): exact arithmetic to check both the rows and g.
    lr = 0.05
    config = run_config(
        least_squares, BY_HAND, grad_sample=12, local_steps=1, local_lr=lr, momentum=0.0,
        batch_size=64, rounds=2,
    )  # fmt: skip
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()
    shards = _shards(least_squares)
    sizes = np.array([len(x) for x, _ in shards], dtype=float)
    shares = sizes / sizes.sum()
    permutation = torch.randperm(30, generator=torch.Generator().manual_seed(config.seed))
    rows = np.sort(permutation[:12].numpy())
    losses = []

    for _ in range(2):
        sampled = [(x[rows], y[rows]) for x, y in shards]
        losses.append(
            sum(p * (np.mean((xs @ w - ys) ** 2) + L2 * w @ w)
                for p, (xs, ys) in zip(shares, sampled, strict=True))
        )  # fmt: skip
        local_grads = [_grad(xs, ys, w) for xs, ys in sampled]
        g = sum(p * gi for p, gi in zip(shares, local_grads, strict=True))
        w = sum(
            p * (w - lr * (_grad(x, y, w) - gi + g))
            for p, (x, y), gi in zip(shares, shards, local_grads, strict=True)
        )

    run = run_reference(prepare_run(config), rounds=2, num_workers=2)

    assert [row["train_loss"] for row in run.history] == pytest.approx(losses, rel=1e-12)
    assert [row["grad_rows"] for row in run.history] == [12, 12]
    np.testing.assert_allclose(run.weights.numpy(), w, rtol=1e-12, atol=1e-14)


def test_the_safeguard_rejects_and_accepts_where_the_quadratic_says(tmp_path):
    # One shard and exact solves: DANE's step is eta Newton steps, and on a quadratic
    # F(w - a N) - F* = (1 - a)^2 (F(w) - F*). With eta = 3 every proposal lands at
    # (1 - 3)^2 = 4 times the gap (rejected), its halving at (1 - 1.5)^2 = 1/4 (accepted):
    # rounds alternate accept, reject, ..., and the gap at each accepted anchor falls by 4.
    one = write_store(
        _least_squares_raw(), PartitionSpec(num_shards=1, seed=0), tmp_path / "1.zarr", force=False
    )
    config = run_config(
        one, BY_HAND, eta=3.0, mu=0.0, safeguard="backtrack", local_solver="cg", local_tol=1e-13
    )
    x, y = _shards(one)[0]
    w_star = np.linalg.solve(x.T @ x / len(x) + L2 * np.eye(5), x.T @ y / len(x))
    loss = lambda u: np.mean((x @ u - y) ** 2) + L2 * u @ u  # noqa: E731
    w0 = initial_weights(prepare_run(config).spec, config.seed).numpy()
    gap0 = loss(w0) - loss(w_star)

    run = run_reference(prepare_run(config), rounds=7, num_workers=1)

    assert [row["safeguard_rejected"] for row in run.history] == [0, 1, 0, 1, 0, 1, 0]
    gaps = [row["train_loss"] - loss(w_star) for row in run.history]
    expected = [1, 4, 1 / 4, 1, 1 / 16, 1 / 4, 1 / 64]  # in units of the first gap
    np.testing.assert_allclose(np.array(gaps) / gap0, expected, rtol=1e-7)


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    """Multinomial logistic regression: d = 4 features, 3 classes, 3 shards of 50 rows."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((180, 4))
    scores = x @ rng.standard_normal((4, 3)) + 0.8 * rng.standard_normal((180, 3))
    y = scores.argmax(axis=1).astype(np.int64)
    raw = RawDataset(
        source="test-three-classes",
        task="classification",
        num_classes=3,
        x_train=x[:150],
        y_train=y[:150],
        x_test=x[150:],
        y_test=y[150:],
    )
    path = tmp_path_factory.mktemp("logistic") / "three.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)


@pytest.mark.parametrize(
    ("algorithm", "settings", "rounds"),
    [("dane", {"mu": 0.01}, 12), ("admm", {"rho": 0.05}, 150)],
)
def test_logistic_baselines_reach_scikit_learns_optimum(three_classes, algorithm, settings, rounds):
    from sklearn.linear_model import LogisticRegression

    l2 = 0.01
    group = zarr.open_group(three_classes.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    mean, std = (np.asarray(three_classes.normalization[k]) for k in ("mean", "std"))
    features = np.hstack([(x - mean) / std, np.ones((len(x), 1))])  # the bias as a feature
    # scikit-learn minimises C sum CE + ||W||^2 / 2; ours is mean CE + l2 ||W||^2 (b included).
    fit = LogisticRegression(C=1 / (2 * l2 * len(x)), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(features, y)  # fmt: skip
    optimum = np.concatenate([fit.coef_[:, :-1].ravel(), fit.coef_[:, -1]])  # W, then b
    # Every row trains (val_fraction 0): scikit-learn's fit is on all of them.
    config = RunConfig(
        store=three_classes.path, model="logistic", dtype="float64", l2=l2, seed=1,
        algorithm=algorithm, local_solver="cg", local_tol=1e-12, val_fraction=0.0, **settings,
    ).validate()  # fmt: skip

    run = run_reference(prepare_run(config), rounds=rounds, num_workers=2)

    error = np.linalg.norm(run.weights.numpy() - optimum) / np.linalg.norm(optimum)
    assert error < 1e-5  # measured: 2.5e-7 (dane), 6.8e-8 (admm); a wrong C gives 0.15
