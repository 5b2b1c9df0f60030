"""One file per algorithm behind the Strategy protocol (base.py); `make_strategy` picks one."""

from __future__ import annotations

from dask_dane.pipeline.algorithms.base import LocalOutput, RoundUpdate, Strategy
from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.fedavg import FedAvg
from dask_dane.pipeline.algorithms.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.sgd import Sgd
from dask_dane.pipeline.config import RunConfig

__all__ = ["LocalOutput", "RoundUpdate", "Strategy", "make_strategy"]


def make_strategy(config: RunConfig) -> Strategy:
    """The Strategy named by config.algorithm, with its hyperparameters from the config."""
    solver = LocalSolver(
        steps=config.local_steps,
        lr=config.local_lr,
        batch_size=config.batch_size,
        optimizer=config.local_optimizer,
        momentum=config.momentum,
    )
    if config.algorithm == "dane":
        return Dane(eta=config.eta, mu=config.mu, solver=solver)
    if config.algorithm == "sgd":
        return Sgd(lr=config.local_lr, batch_size=config.batch_size, momentum=config.momentum)
    if config.algorithm == "fedavg":
        return FedAvg(solver=solver)
    raise ValueError(f"unknown --algorithm {config.algorithm!r}")
