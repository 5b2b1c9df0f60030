"""One file per algorithm behind the Strategy protocol (base.py); `make_strategy` picks one."""

from __future__ import annotations

from ..config import RunConfig
from .admm import Admm
from .agd import Agd
from .base import LocalOutput, RoundUpdate, Strategy
from .dane import Dane
from .exact_solver import ExactSolver
from .fedavg import FedAvg
from .fedprox import FedProx
from .gd import Gd
from .local_solver import LocalSolver, Solver
from .oneshot import OneShot
from .sgd import Sgd

__all__ = ["LocalOutput", "RoundUpdate", "Strategy", "make_strategy"]


def make_strategy(config: RunConfig) -> Strategy:
    """The Strategy named by config.algorithm, with its hyperparameters from the config."""
    solver: Solver = LocalSolver(
        steps=config.local_steps,
        lr=config.local_lr,
        batch_size=config.batch_size,
        optimizer=config.local_optimizer,
        momentum=config.momentum,
    )
    if config.local_solver != "steps":
        solver = ExactSolver(method=config.local_solver, tol=config.local_tol)
    if config.algorithm == "dane":
        return Dane(
            eta=config.eta,
            mu=config.mu,
            solver=solver,
            safeguard=config.safeguard,
            grad_sample=config.grad_sample,
            sample_seed=config.seed,
        )
    if config.algorithm == "sgd":
        return Sgd(lr=config.local_lr, batch_size=config.batch_size, momentum=config.momentum)
    if config.algorithm == "fedavg":
        return FedAvg(solver=solver)
    if config.algorithm == "fedprox":
        return FedProx(mu=config.mu, solver=solver)
    if config.algorithm == "one-shot":
        return OneShot(solver=solver)
    if config.algorithm == "admm":
        return Admm(rho=config.rho, solver=solver)
    # gd / agd: --local-lr is the step size, --momentum agd's Nesterov coefficient beta.
    if config.algorithm == "gd":
        return Gd(lr=config.local_lr)
    if config.algorithm == "agd":
        return Agd(lr=config.local_lr, beta=config.momentum)
    raise ValueError(f"unknown --algorithm {config.algorithm!r}")
