"""Sample weighting under an independent oracle: DANE on unequal Dirichlet shards.

Every other oracle splits its rows into equal shards, where a mean weighted by rows and a plain
mean over shards agree, so an unweighted mean, or a task that reports the wrong number of rows,
passes them. Here the shards hold 13 to 114 rows (Dirichlet, alpha = 0.3) and the numpy
computation weights each shard by its rows, n_i / N; the same computation with equal weights
is shown to differ, so the test can fail.

The model is multinomial logistic regression (x -> W x + b, mean cross-entropy plus
lambda ||theta||^2, b included), so every loss and gradient is a line of numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr
from run_configs import run_config

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.algorithms.parts.server import FEDEXP_EPSILON
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

L2 = 0.01
CLASSES, FEATURES = 3, 4
# eta, mu, local lr, momentum, local steps: three momentum steps, each on the whole shard.
ETA, MU, LR, BETA, STEPS = 0.9, 0.2, 0.5, 0.9, 3


@pytest.fixture(scope="module")
def dirichlet_store(tmp_path_factory):
    """240 training rows of 3 classes in 4 Dirichlet(0.3) shards of 63, 114, 50 and 13 rows."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, FEATURES))
    scores = x @ rng.standard_normal((FEATURES, CLASSES)) + 0.8 * rng.standard_normal((300, 3))
    y = scores.argmax(axis=1).astype(np.int64)
    raw = RawDataset(
        source="test-dirichlet-logistic",
        task="classification",
        num_classes=CLASSES,
        x_train=x[:240],
        y_train=y[:240],
        x_test=x[240:],
        y_test=y[240:],
    )
    spec = PartitionSpec(kind="dirichlet", alpha=0.3, num_shards=4, seed=0)
    path = tmp_path_factory.mktemp("weighting") / "dirichlet.zarr"
    return write_store(raw, spec, path, force=False)


# A minibatch of 1000 covers every shard: each local step is a full-shard step, on every row
# (val_fraction 0), as the oracle computes it.
SETTINGS = {
    "model": "logistic", "dtype": "float64", "l2": L2, "seed": 3, "algorithm": "dane",
    "momentum": BETA, "local_steps": STEPS, "batch_size": 1000, "val_fraction": 0.0,
    "rounds": 2, "eta": ETA, "mu": MU, "local_lr": LR,
}  # fmt: skip


def _shards(info) -> list[tuple[np.ndarray, np.ndarray]]:
    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    mean, std = (np.asarray(info.normalization[k]) for k in ("mean", "std"))
    return [((x[a:b] - mean) / std, y[a:b]) for a, b in info.shards]


def _loss_and_grad(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of softmax(x W' + b) plus L2 ||theta||^2; theta = [W.ravel(), b]."""
    w, b = theta[: CLASSES * FEATURES].reshape(CLASSES, FEATURES), theta[CLASSES * FEATURES :]
    scores = x @ w.T + b
    scores -= scores.max(axis=1, keepdims=True)
    log_p = scores - np.log(np.exp(scores).sum(axis=1, keepdims=True))
    onehot = np.eye(CLASSES)[y]
    loss = -np.mean(np.sum(onehot * log_p, axis=1)) + L2 * theta @ theta
    residual = (np.exp(log_p) - onehot) / len(x)
    grad = np.concatenate([(residual.T @ x).ravel(), residual.sum(axis=0)]) + 2 * L2 * theta
    return loss, grad


def _dane_solutions(shards, theta: np.ndarray, shares: np.ndarray, eta=ETA, mu=MU, lr=LR):
    """One DANE round's local solutions v_i from theta, and the round's train loss."""
    evaluated = [_loss_and_grad(x, y, theta) for x, y in shards]
    loss = sum(p * loss for p, (loss, _) in zip(shares, evaluated, strict=True))
    g = sum(p * gi for p, (_, gi) in zip(shares, evaluated, strict=True))
    solutions = []
    for (x, y), (_, gi) in zip(shards, evaluated, strict=True):
        v, buf = theta.copy(), None
        for _ in range(STEPS):  # torch's SGD: buf = grad, then beta * buf + grad
            grad_h = _loss_and_grad(x, y, v)[1] - (gi - eta * g) + mu * (v - theta)
            buf = grad_h if buf is None else BETA * buf + grad_h
            v = v - lr * buf
        solutions.append(v)
    return solutions, loss


def _two_dane_iterations(
    shards, theta: np.ndarray, shares: np.ndarray
) -> tuple[np.ndarray, list[float]]:
    """Two DANE rounds averaged with `shares`; the final weights and each round's train loss."""
    losses = []
    for _ in range(2):
        solutions, loss = _dane_solutions(shards, theta, shares)
        losses.append(loss)
        theta = sum(p * v for p, v in zip(shares, solutions, strict=True))
    return theta, losses


def _fedexp_round(shards, theta, shares, **steps) -> tuple[np.ndarray, float]:
    """One DANE round with FedExP's step: s = max(1, sum_i p_i ||D_i||^2 / (2 (||D||^2 + eps)))
    with D_i = v_i - theta and D = sum_i p_i D_i; the new weights theta + s D, and s."""
    solutions, _ = _dane_solutions(shards, theta, shares, **steps)
    updates = [v - theta for v in solutions]
    average = sum(p * u for p, u in zip(shares, updates, strict=True))
    spread = sum(p * (u @ u) for p, u in zip(shares, updates, strict=True))
    scale = max(1.0, spread / (2 * (average @ average + FEDEXP_EPSILON)))
    return theta + scale * average, scale


@pytest.fixture(scope="module")
def oracle(dirichlet_store):
    """(weights, losses) weighted by rows, and the weights of the same steps unweighted."""
    config = run_config(dirichlet_store, SETTINGS)
    theta = initial_weights(prepare_run(config).spec, config.seed).numpy()
    shards = _shards(dirichlet_store)
    sizes = np.array([len(x) for x, _ in shards], dtype=float)
    weighted = _two_dane_iterations(shards, theta, sizes / sizes.sum())
    unweighted, _ = _two_dane_iterations(shards, theta, np.full(len(sizes), 1 / len(sizes)))
    return weighted, unweighted


def test_the_shards_are_unequal_and_unweighting_them_changes_the_answer(dirichlet_store, oracle):
    # The premise: shards of very different sizes, and an oracle that tells the two means
    # apart by far more than the tolerance the runs are held to below (1e-12).
    sizes = [b - a for a, b in dirichlet_store.shards]
    assert sizes == [63, 114, 50, 13]
    (weighted, _), unweighted = oracle
    assert np.max(np.abs(weighted - unweighted)) > 1e-3


def test_two_dane_iterations_on_unequal_shards_weight_each_shard_by_its_rows(
    dirichlet_store, oracle
):
    (expected, losses), unweighted = oracle

    run = run_reference(prepare_run(run_config(dirichlet_store, SETTINGS)), rounds=2, num_workers=2)

    weights = run.weights.numpy()
    np.testing.assert_allclose(weights, expected, rtol=1e-12, atol=1e-14)
    assert [row["train_loss"] for row in run.history] == pytest.approx(losses, rel=1e-12)
    assert not np.allclose(weights, unweighted, rtol=0, atol=1e-6)


@pytest.mark.cluster
def test_the_dask_run_on_unequal_shards_weights_each_shard_by_its_rows(
    cluster_client, dirichlet_store, oracle, tmp_path
):
    # 4 shards on 2 workers: each worker sums its own shards before the driver's mean, so a
    # partial reported with the wrong row count would move the weights too.
    (expected, losses), unweighted = oracle
    config = run_config(dirichlet_store, SETTINGS, out=tmp_path / "run")
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)

    train(config, client=cluster_client)

    run = RunDir(tmp_path / "run")
    weights = run.final_weights()
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-12, atol=1e-14)
    assert torch.equal(weights, reference.weights)
    assert [row["train_loss"] for row in run.rows()] == pytest.approx(losses, rel=1e-12)
    assert not np.allclose(weights.numpy(), unweighted, rtol=0, atol=1e-6)


def test_fedexp_on_unequal_shards_weights_the_spread_and_the_average_by_rows(dirichlet_store):
    # FedExP's own oracle (test_server_step.py) has equal shards and FedAvg's solutions; here
    # DANE's local solutions on shards of 13 to 114 rows, each weighted by its rows in both
    # the spread and the average. DANE's corrected solutions mostly agree (s = 1, which no
    # bug in the rule would change): eta 0.3 and long steps make them spread, so s > 2.
    steps = {"eta": 0.3, "mu": 0.0, "lr": 10.0}
    config = run_config(dirichlet_store, SETTINGS, server_lr_rule="fedexp", rounds=1,
                        local_clip=0.0, eta=0.3, mu=0.0, local_lr=10.0)  # fmt: skip
    theta = initial_weights(prepare_run(config).spec, config.seed).numpy()
    shards = _shards(dirichlet_store)
    sizes = np.array([len(x) for x, _ in shards], dtype=float)
    expected, scale = _fedexp_round(shards, theta, sizes / sizes.sum(), **steps)
    _, unweighted_scale = _fedexp_round(shards, theta, np.full(4, 0.25), **steps)

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    assert scale > 2.0 and abs(scale - unweighted_scale) > 1e-2
    assert run.history[0]["server_lr"] == pytest.approx(scale, rel=1e-12)
    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-12, atol=1e-14)
