"""The fixtures of the convex problems whose closed forms the exact solves are checked
against: each shard's quadratic, a float64 linear run with exact local solves, and a small
least-squares store. conftest.py imports them, so every test under tests/ can take them."""

from __future__ import annotations

import numpy as np
import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.store import write_store


def _shard_quadratics(info, l2: float) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[float]]:
    """Per shard (H_i, b_i) with f_i(w) = mean_rows (x w - y)^2 + l2 ||w||^2
    = (1/2) w'H_i w - b_i'w + const, and each shard's share n_i / N of the rows."""
    import zarr

    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    eye = np.eye(x.shape[1])
    parts = []
    for a, b in info.shards:
        xi, yi = x[a:b], y[a:b]
        parts.append((2 * xi.T @ xi / len(xi) + 2 * l2 * eye, 2 * xi.T @ yi / len(xi)))
    return parts, [(b - a) / len(x) for a, b in info.shards]


@pytest.fixture(scope="session")
def shard_quadratics():
    """(store info of a least-squares store, its lambda) -> each shard's (H_i, b_i), shares."""
    return _shard_quadratics


def _exact_setup(info, algorithm: str, *, seed: int = 2, local_tol: float = 1e-12, **settings):
    """A float64 linear-model run on `info` with exact (cg) local solves: (setup, w0).

    Every row trains (val_fraction 0): the closed forms it is checked against are of the
    shards' whole quadratics."""
    from dask_dane.pipeline.setup.config import RunConfig
    from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run

    config = RunConfig(
        store=info.path, model="linear", dtype="float64", algorithm=algorithm,
        local_solver="cg", local_tol=local_tol, seed=seed, **{"val_fraction": 0.0, **settings},
    ).validate()  # fmt: skip
    setup = prepare_run(config)
    return setup, initial_weights(setup.spec, config.seed).numpy()


@pytest.fixture(scope="session")
def exact_setup():
    """(store info, algorithm, settings...) -> (setup, initial weights) with exact solves."""
    return _exact_setup


@pytest.fixture(scope="session")
def small_least_squares(tmp_path_factory):
    """Least squares (d = 4, lambda 0.02, float64) in three 30-row iid shards: small enough
    that every local step can cover a whole shard, so numpy oracles need no sampling."""
    from dask_dane.datasets.sources import RawDataset

    rng = np.random.default_rng(5)
    x = rng.standard_normal((110, 4)) * np.array([1.5, 1.0, 0.6, 0.3])
    y = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.5 * rng.standard_normal(110)
    raw = RawDataset(source="test-small-least-squares", task="regression", num_classes=1,
                     x_train=x[:90], y_train=y[:90], x_test=x[90:], y_test=y[90:],
                     attrs={"l2": 0.02})  # fmt: skip
    path = tmp_path_factory.mktemp("least-squares") / "ls.zarr"
    return write_store(raw, PartitionSpec(num_shards=3, seed=0), path, force=False)
