"""DANE as the paper defines it on convex models: the linear objective with the store's l2, its
Hessian operator, exact local solves (CG, L-BFGS, Newton-CG) of DANE's local problem, one DANE
iteration through Dask equal to the closed form, and bad convex input to `dane train` refused.
The paper's bench and its source: tests/bench/test_convex_bench.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset, SourceOptions, load_source
from dask_dane.datasets.store import StoreInfo, write_store
from dask_dane.pipeline.algorithms.parts.exact_solver import ExactSolver
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem
from dask_dane.pipeline.engine.round.shards import load_shard, make_objective
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import Callbacks, train


def ridge_store(
    path: Path, *, n: int = 120, d: int = 8, shards: int = 3, l2: float = 0.01, seed: int = 0
) -> StoreInfo:
    """A random float64 least-squares problem with unequal feature scales (well conditioned)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n + 20, d)) * np.linspace(1.0, 0.2, d)
    y = x @ np.ones(d) + 0.5 * rng.standard_normal(n + 20)
    raw = RawDataset(
        source="test-ridge",
        task="regression",
        num_classes=1,
        x_train=x[:n],
        y_train=y[:n],
        x_test=x[n:],
        y_test=y[n:],
        attrs={"l2": l2},
    )
    return write_store(
        raw, PartitionSpec(kind="iid", num_shards=shards, seed=seed), path, force=False
    )


def ridge_arrays(info: StoreInfo) -> tuple[np.ndarray, np.ndarray]:
    """Training rows in stored (shard) order."""
    import zarr

    group = zarr.open_group(info.path, mode="r")
    return group["train/x"][:], group["train/y"][:]


def ridge_hessians(info: StoreInfo) -> tuple[np.ndarray, list[np.ndarray], list[float]]:
    """H of f = (1/N)||Xw - y||^2 + l2 ||w||^2, each shard's H_i, and the weights n_i / N."""
    x, _ = ridge_arrays(info)
    d = x.shape[1]
    hess = lambda rows: 2 * rows.T @ rows / len(rows) + 2 * info.l2 * np.eye(d)  # noqa: E731
    shards = [hess(x[a:b]) for a, b in info.shards]
    return hess(x), shards, [(b - a) / len(x) for a, b in info.shards]


def ridge_gradient(info: StoreInfo, w: np.ndarray, rows: slice = slice(None)) -> np.ndarray:
    x, y = ridge_arrays(info)
    x, y = x[rows], y[rows]
    return 2 * x.T @ (x @ w - y) / len(x) + 2 * info.l2 * w


@pytest.fixture(scope="module")
def ridge(tmp_path_factory):
    return ridge_store(tmp_path_factory.mktemp("ridge") / "ridge.zarr")


def _objective(info, config_overrides=None, *, rows=None):
    settings = {"val_fraction": 0.0, **(config_overrides or {})}  # rows as ridge_arrays reads
    config = RunConfig(store=info.path, model="linear", dtype="float64", **settings)
    setup = prepare_run(config.validate())
    start, stop = rows if rows is not None else (0, info.num_train)
    shard = load_shard(**{**setup.shard_args(0), "start": start, "stop": stop})
    return setup, make_objective(setup.spec, shard)


# --- pure: objective, solvers ---------------------------------------------------------------


def test_linear_objective_includes_the_stores_l2_in_loss_and_gradient(ridge):
    setup, objective = _objective(ridge)
    w = torch.linspace(-1, 1, 8, dtype=torch.float64)
    x, y = ridge_arrays(ridge)

    loss, grad = objective.loss_and_grad(w)

    expected = np.mean((x @ w.numpy() - y) ** 2) + 0.01 * float(w @ w)
    assert setup.spec.l2 == 0.01  # from the store attribute
    assert loss == pytest.approx(expected, rel=1e-13)
    np.testing.assert_allclose(grad.numpy(), ridge_gradient(ridge, w.numpy()), rtol=1e-12)


def test_l2_flag_overrides_the_store_attribute(ridge):
    setup, objective = _objective(ridge, {"l2": 0.5})
    w = torch.ones(8, dtype=torch.float64)

    with_flag, _ = objective.loss_and_grad(w)
    _, plain = _objective(ridge, {"l2": 0.0})
    without, _ = plain.loss_and_grad(w)

    assert setup.spec.l2 == 0.5
    assert with_flag - without == pytest.approx(0.5 * 8, rel=1e-12)


def test_hessian_operator_equals_the_closed_form(ridge):
    _, objective = _objective(ridge)
    hess, _, _ = ridge_hessians(ridge)
    v = torch.arange(8, dtype=torch.float64)

    product = objective.hessian_operator(torch.zeros(8, dtype=torch.float64))

    np.testing.assert_allclose(product(v).numpy(), hess @ v.numpy(), rtol=1e-12)
    np.testing.assert_allclose(product(torch.eye(8, dtype=torch.float64)).numpy(), hess, rtol=1e-12)


@pytest.mark.parametrize("method", ["cg", "lbfgs"])
def test_exact_solver_solves_the_dane_local_problem(ridge, method):
    # argmin_v f_i(v) - <c, v> + (mu/2)||v - a||^2 = (H_i + mu I)^-1 (b_i + c + mu a) for a
    # quadratic f_i = (1/2) v'H_i v - b_i'v + const.
    start, stop = ridge.shards[1]
    _, objective = _objective(ridge, rows=(start, stop))
    _, shard_hessians, _ = ridge_hessians(ridge)
    h_i = shard_hessians[1]
    b_i = -ridge_gradient(ridge, np.zeros(8), slice(start, stop))
    c = np.linspace(0.3, -0.2, 8)
    a = np.full(8, 0.5)
    mu = 0.2
    expected = np.linalg.solve(h_i + mu * np.eye(8), b_i + c + mu * a)

    problem = LocalProblem(objective, linear=torch.from_numpy(c), anchor=torch.from_numpy(a), mu=mu)
    solution = ExactSolver(local_solver=method, local_tol=1e-12).solve(
        problem, torch.zeros(8, dtype=torch.float64), torch.Generator()
    )
    v, first_loss = solution.weights, solution.first_loss

    assert np.abs(v.numpy() - expected).max() / np.abs(expected).max() < 1e-9
    _, shard_y = ridge_arrays(ridge)
    assert first_loss == pytest.approx(np.mean(shard_y[start:stop] ** 2), rel=1e-12)  # f_i(0)


def test_newton_cg_reaches_the_tolerance_on_logistic_regression(tmp_path):
    raw = load_source("digits-tabular", SourceOptions(seed=0))
    info = write_store(raw, PartitionSpec(num_shards=2), tmp_path / "d.zarr", force=False)
    config = RunConfig(store=info.path, model="logistic", dtype="float64", l2=1e-3).validate()
    setup = prepare_run(config)
    objective = make_objective(setup.spec, load_shard(**setup.shard_args(0)))
    w0 = initial_weights(setup.spec, 0)
    _, g0 = objective.loss_and_grad(w0)

    v = (
        ExactSolver(local_solver="cg", local_tol=1e-10)
        .solve(LocalProblem(objective), w0, torch.Generator())
        .weights
    )

    _, g = objective.loss_and_grad(v)
    assert float(g.norm()) <= 1e-10 * float(g0.norm())
    assert float(g0.norm()) > 0.1  # the start was far from the optimum


# --- through Dask ---------------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("solver", "eta", "mu"),
    [("cg", 1.0, 0.0), ("cg", 0.5, 0.1), ("cg", 1.3, 1.0), ("lbfgs", 1.0, 0.05)],
)
def test_one_dane_iteration_through_dask_is_the_closed_form(
    ridge, cluster_client, tmp_path, solver, eta, mu
):
    config = RunConfig(
        store=ridge.path,
        out=str(tmp_path / "run"),
        model="linear",
        dtype="float64",
        eta=eta,
        mu=mu,
        local_solver=solver,
        local_tol=1e-10,
        rounds=1,
        seed=5,
        val_fraction=0.0,  # the closed form is of every row's quadratic
    ).validate()
    w0 = initial_weights(prepare_run(config).spec, config.seed).numpy()
    _, shard_hessians, shares = ridge_hessians(ridge)
    g = ridge_gradient(ridge, w0)
    eye = np.eye(len(w0))
    expected = w0 - eta * sum(
        p * np.linalg.solve(h + mu * eye, g) for p, h in zip(shares, shard_hessians, strict=True)
    )
    seen = []

    train(
        config, client=cluster_client, callbacks=Callbacks(on_weights=lambda t, w: seen.append(w))
    )

    (w1,) = seen
    assert w1.dtype == torch.float64
    assert np.linalg.norm(w1.numpy() - expected) / np.linalg.norm(expected) < 1e-8
    assert np.linalg.norm(expected - w0) > 0.1  # the step is not trivially small


# --- bad input ------------------------------------------------------------------------------


def test_bad_convex_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from dask_dane.cli.entry import main

    ridge_path = tmp_path / "ridge.zarr"
    write_store(
        load_source("synthetic-ridge", SourceOptions(samples=40)),
        PartitionSpec(num_shards=2),
        ridge_path,
        force=False,
    )
    images = tmp_path / "images.zarr"
    write_store(
        load_source("digits", SourceOptions()), PartitionSpec(num_shards=2), images, force=False
    )
    table = tmp_path / "table.zarr"
    write_store(
        load_source("digits-tabular", SourceOptions()),
        PartitionSpec(num_shards=2),
        table,
        force=False,
    )
    f64 = ["--dtype", "float64"]
    cases = {
        "tabular model on images": ([str(images), "--model", "linear", *f64], "tabular rows"),
        "image model on tabular": ([str(ridge_path), "--model", "small-cnn", *f64], "images"),
        "classifier on regression": ([str(ridge_path), "--model", "logistic", *f64], "regression"),
        "regression on labels": ([str(table), "--model", "linear", *f64], "classification"),
        "exact solver, non-convex": (
            [str(table), "--model", "mlp", "--local-solver", "cg", *f64],
            "convex",
        ),
        "tol zero": ([str(ridge_path), "--model", "linear", "--local-tol", "0", *f64], "(0, 1)"),
        "tol one": ([str(ridge_path), "--model", "linear", "--local-tol", "1", *f64], "(0, 1)"),
        "float64 store, float32 run": ([str(ridge_path), "--model", "linear"], "--dtype float64"),
    }
    monkeypatch.setenv("DANE_CACHE", str(tmp_path / "cache"))
    before = sorted(p.name for p in tmp_path.iterdir())

    for case, (args, expected) in cases.items():
        out = tmp_path / "run"
        monkeypatch.setattr(sys, "argv", ["dane", "train", *args, "--out", str(out)])
        with pytest.raises(SystemExit) as exit_info:
            main()
        lines = capsys.readouterr().err.strip().splitlines()

        assert exit_info.value.code == 2, case
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, lines)
        assert expected in lines[0], (case, lines[0])
        assert sorted(p.name for p in tmp_path.iterdir()) == before, case  # nothing written
