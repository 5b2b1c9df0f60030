"""The convergence benchmark's grid (ConvergenceSpec) and its cells' problems: the store, the
full objective's minimiser w* from a direct solve and its Hessian, and each run's RunConfig."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...datasets.sources import SourceOptions
from ...datasets.store import StoreInfo, open_store
from ...pipeline.algorithms.parts.exact_solver import ExactSolver
from ...pipeline.algorithms.parts.local_problem import LocalProblem
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import initial_weights, prepare_run, prepare_store
from ..common.specs import option, run_config
from ..common.training_set import full_objective, shard_objectives

PROBLEMS = ("ridge", "logistic")
BENCH_ALGORITHMS = ("dane", "admm", "one-shot", "gd", "agd", "fedprox")
LOGISTIC_L2 = 1e-3  # digits-tabular has no recorded lambda; this one keeps it well posed


@dataclass(frozen=True, kw_only=True)
class ConvergenceSpec:
    """One benchmark grid; see `dane bench convergence --help` for the meaning of each."""

    problem: str = option(
        "ridge", help="ridge (synthetic-ridge, linear) | logistic (digits-tabular)."
    )
    machines: tuple[int, ...] = option((4, 16, 64), help="Shard counts m, comma-separated.")
    samples: tuple[int, ...] = option(
        (6000, 10000, 14000), help="ridge: training samples N, comma-separated."
    )
    mus: tuple[float, ...] = option(
        (0.0, 0.015), flag="--mu", help="DANE (and fedprox) mu values, comma-separated."
    )
    eta: float = option(1.0, help="DANE eta.")
    rounds: int = option(30, help="Iterations per run.")
    seeds: int = option(3, help="Seeds (data, partition, init) per cell.")
    algorithms: tuple[str, ...] = option(
        ("dane",), help="Comma-separated: dane, admm, one-shot, gd, agd, fedprox."
    )
    local_solver: str = option("cg", help="Exact local solver: cg | lbfgs.")
    local_tol: float = option(1e-10, help="Its relative gradient tolerance.")
    # admm; None: sqrt(L * lambda_min) of the full Hessian.
    rho: float | None = option(None, help="admm penalty (default: sqrt(L * lambda_min)).")
    # None: the store's (ridge: 0.005), logistic: LOGISTIC_L2.
    l2: float | None = option(None, help="L2 lambda (default: ridge 0.005, logistic 1e-3).")
    workdir: str = option("bench-out/convergence", help="Where stores and run directories go.")

    def validate(self) -> ConvergenceSpec:
        if self.problem not in PROBLEMS:
            raise ValueError(f"unknown --problem {self.problem!r}; choose one of: ridge, logistic")
        unknown = [a for a in self.algorithms if a not in BENCH_ALGORITHMS]
        if unknown or not self.algorithms:
            raise ValueError(
                f"unknown --algorithms {','.join(unknown) or '(none)'}; choose from: "
                + ",".join(BENCH_ALGORITHMS)
            )
        for flag, values in (("--machines", self.machines), ("--samples", self.samples)):
            if not values or min(values) < 1:
                raise ValueError(f"{flag} must be a comma-separated list of positive integers")
        for m in self.machines:
            for n in self.samples if self.problem == "ridge" else ():
                if n < m:
                    raise ValueError(f"--samples {n} cannot fill --machines {m} shards")
        if self.rounds < 1 or self.seeds < 1:
            raise ValueError("--rounds and --seeds must be at least 1")
        if not self.mus or min(self.mus) < 0:
            raise ValueError("--mu must be a list of zero or positive numbers")
        if self.local_solver not in ("cg", "lbfgs"):
            raise ValueError(
                f"--local-solver must be cg or lbfgs for this benchmark (got {self.local_solver!r})"
            )
        # The remaining settings are checked by RunConfig.validate when the first run starts.
        run_config(eta=self.eta, local_solver=self.local_solver, local_tol=self.local_tol)
        return self


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One store and what the bench knows about its full objective."""

    store: str
    info: StoreInfo
    w_star: torch.Tensor
    f_star: float
    hessian: torch.Tensor  # of the full objective at w*
    shard_hessians: list[torch.Tensor]  # of each f_i at w*
    shard_weights: list[float]  # n_i / N
    quadratic: bool
    objective: Any  # the full-data ShardObjective, for non-quadratic suboptimality

    def suboptimality(self, w: torch.Tensor) -> float:
        if not bool(torch.isfinite(w).all()):
            return math.inf
        e = w - self.w_star
        if self.quadratic:
            return 0.5 * float(e @ self.hessian @ e)
        loss, _ = self.objective.loss_and_grad(w)
        return loss - self.f_star

    def dane_radius(self, eta: float, mu: float) -> float:
        """Spectral radius of I - eta * mean_i (H_i + mu I)^-1 H."""
        d = self.hessian.shape[0]
        eye = torch.eye(d, dtype=self.hessian.dtype)
        average = sum(
            p * torch.linalg.solve(h + mu * eye, self.hessian)
            for p, h in zip(self.shard_weights, self.shard_hessians, strict=True)
        )
        return float(torch.linalg.eigvals(eye - eta * average).abs().max())

    def curvature(self) -> tuple[float, float]:
        """(L, lambda_min) of the full Hessian."""
        eigenvalues = torch.linalg.eigvalsh(self.hessian)
        return float(eigenvalues[-1]), float(eigenvalues[0])


def _model(problem: str) -> str:
    return "linear" if problem == "ridge" else "logistic"


def prepare_problem(spec: ConvergenceSpec, *, machines: int, samples: int, seed: int) -> Problem:
    """Write (or reuse) the cell's store, then solve the full problem directly."""
    root = Path(spec.workdir) / "stores"
    if spec.problem == "ridge":
        source, options = "synthetic-ridge", SourceOptions(seed=seed, samples=samples)
        name = f"ridge-N{samples}-m{machines}-seed{seed}.zarr"
    else:
        source, options = "digits-tabular", SourceOptions(seed=seed)
        name = f"digits-tabular-m{machines}-seed{seed}.zarr"
    path = prepare_store(source, root / name, shards=machines, seed=seed, options=options)
    info = open_store(path)
    config = cell_config(spec, str(path), "dane", seed=seed, mu=0.0, out=str(root / "unused"))
    setup = prepare_run(config)
    shards = shard_objectives(setup)
    full = full_objective(setup)
    w0 = initial_weights(setup.spec, seed)
    exact = ExactSolver(local_solver="cg", local_tol=1e-13)
    w_star = exact.solve(LocalProblem(full), w0, torch.Generator()).weights
    f_star, _ = full.loss_and_grad(w_star)
    return Problem(
        store=str(path),
        info=info,
        w_star=w_star,
        f_star=f_star,
        hessian=_hessian(full, w_star),
        shard_hessians=[_hessian(s, w_star) for s in shards],
        shard_weights=[s.num_samples / info.num_train for s in shards],
        quadratic=spec.problem == "ridge",
        objective=full,
    )


def _hessian(objective: Any, w: torch.Tensor) -> torch.Tensor:
    """The dense Hessian of a shard objective at w (d Hessian-vector products, vectorised)."""
    product = objective.hessian_operator(w)
    eye = torch.eye(w.numel(), dtype=w.dtype)
    rows = product(eye)
    return 0.5 * (rows + rows.T)


def cell_config(spec: ConvergenceSpec, store: str, algorithm: str, **settings: Any) -> RunConfig:
    l2 = spec.l2 if spec.l2 is not None else (LOGISTIC_L2 if spec.problem == "logistic" else None)
    return run_config(
        **{
            "store": store,
            "algorithm": algorithm,
            "model": _model(spec.problem),
            "dtype": "float64",
            "eta": spec.eta,
            "rounds": spec.rounds,
            "local_solver": spec.local_solver,
            "local_tol": spec.local_tol,
            "l2": l2,
            "eval_every": spec.rounds,
            "workers": 2,
            "val_fraction": 0.0,  # w*, the Hessian and the rates are of every training row
            **settings,
        }
    )
