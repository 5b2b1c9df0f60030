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

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.config import RunConfig
from dask_dane.pipeline.reference import run_reference
from dask_dane.pipeline.run_setup import initial_weights, prepare_run

L2 = 0.02


@pytest.fixture(scope="module")
def least_squares(tmp_path_factory):
    """d = 5, 3 shards of 30 rows, float64."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((110, 5)) * np.array([1.5, 1.0, 0.7, 0.4, 0.2])
    y = x @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.4 * rng.standard_normal(110)
    raw = RawDataset(
        source="test-least-squares",
        task="regression",
        num_classes=1,
        x_train=x[:90],
        y_train=y[:90],
        x_test=x[90:],
        y_test=y[90:],
        attrs={"l2": L2},
    )
    path = tmp_path_factory.mktemp("oracle") / "ls.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)


def _shards(info) -> list[tuple[np.ndarray, np.ndarray]]:
    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    return [(x[a:b], y[a:b]) for a, b in info.shards]


def _grad(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
    return 2 * x.T @ (x @ v - y) / len(x) + 2 * L2 * v


def _config(info, **settings) -> RunConfig:
    return RunConfig(
        store=info.path, model="linear", dtype="float64", seed=3, **settings
    ).validate()


def test_two_dane_iterations_with_three_momentum_steps_match_the_hand_computation(
    least_squares,
):
    # A minibatch of 64 covers a 30-row shard, so every local step is a full-shard step and
    # the hand computation needs no sampling.
    eta, mu, lr, beta, steps = 0.8, 0.3, 0.1, 0.9, 3
    config = _config(
        least_squares, eta=eta, mu=mu, local_lr=lr, momentum=beta, local_steps=steps,
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
    config = _config(
        least_squares, grad_sample=12, local_steps=1, local_lr=lr, momentum=0.0,
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
