"""`dane bench convergence`: the DANE paper's synthetic experiment, and its baselines.

For every cell (machines m, samples N, seed, and for DANE each mu) a store is prepared, the
algorithm is trained through the Dask pipeline (`loop.train` on one shared cluster), and every
iterate w_t is scored against w*, the minimiser of the full objective from a direct solve:
- suboptimality f(w_t) - f(w*) (for the quadratic: (1/2) e' H e with e = w_t - w*, exact);
- the measured contraction rate of ||w_t - w*|| per iteration (f - f* shrinks as its square);
- for DANE, the spectral radius of I - eta * mean_i (H_i + mu I)^-1 H, computed directly
  (for logistic: with the Hessians at w*, the asymptotic rate);
- iterations and communication rounds (counted by the pipeline) to reach 1e-6, divergence.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..datasets.partition import PartitionSpec
from ..datasets.sources import SourceOptions, load_source
from ..datasets.store import StoreInfo, open_store, write_store
from ..pipeline.algorithms.exact_solver import ExactSolver
from ..pipeline.algorithms.local_solver import LocalProblem
from ..pipeline.config import RunConfig
from ..pipeline.loop import Callbacks, TrainingDiverged, train
from ..pipeline.run_setup import initial_weights, prepare_run
from ..pipeline.shards import make_objective
from ..pipeline.tasks import load_shard
from .specs import run_config

PROBLEMS = ("ridge", "logistic")
BENCH_ALGORITHMS = ("dane", "admm", "one-shot", "gd", "agd", "fedprox")
THRESHOLD = 1e-6
LOGISTIC_L2 = 1e-3  # digits-tabular has no recorded lambda; this one keeps it well posed
FLOOR = 1e-20  # suboptimalities below this are rounding noise: not used for rates


@dataclass(frozen=True, kw_only=True)
class ConvergenceSpec:
    """One benchmark grid; see `dane bench convergence --help` for the meaning of each."""

    problem: str = "ridge"
    machines: tuple[int, ...] = (4, 16, 64)
    samples: tuple[int, ...] = (6000, 10000, 14000)
    mus: tuple[float, ...] = (0.0, 0.015)
    eta: float = 1.0
    rounds: int = 30
    seeds: int = 3
    algorithms: tuple[str, ...] = ("dane",)
    local_solver: str = "cg"
    local_tol: float = 1e-10
    rho: float | None = None  # admm; None: sqrt(L * lambda_min) of the full Hessian
    l2: float | None = None  # None: the store's (ridge: 0.005), logistic: LOGISTIC_L2
    workdir: str = "bench-out/convergence"

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
    path = root / name
    if not path.exists():
        partition = PartitionSpec(kind="iid", num_shards=machines, seed=seed)
        write_store(load_source(source, options), partition, path, force=False)
    info = open_store(path)
    config = _config(spec, str(path), "dane", seed=seed, mu=0.0, out=str(root / "unused"))
    setup = prepare_run(config)
    shard_args = [setup.shard_args(i) for i in range(info.num_shards)]
    full = make_objective(
        setup.spec,
        load_shard(**{**shard_args[0], "start": 0, "stop": info.num_train, "index": 0}),
    )
    w0 = initial_weights(setup.spec, seed)
    exact = ExactSolver(local_solver="cg", local_tol=1e-13)
    w_star = exact.solve(LocalProblem(full), w0, torch.Generator()).weights
    f_star, _ = full.loss_and_grad(w_star)
    shards = [make_objective(setup.spec, load_shard(**a)) for a in shard_args]
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


def _config(spec: ConvergenceSpec, store: str, algorithm: str, **settings: Any) -> RunConfig:
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
            **settings,
        }
    )


def measured_rate(subopt: list[float]) -> float:
    """Per-iteration contraction of ||w_t - w*||: sqrt of the fitted decay of f - f*.

    Fitted (least squares on log10) over the last 8 iterates above the rounding floor, after
    the first iterate, where the slowest mode dominates.
    """
    points = [
        (t, math.log10(s)) for t, s in enumerate(subopt) if t > 0 and math.isfinite(s) and s > FLOOR
    ]
    points = points[-8:]
    if len(points) < 2:
        return math.nan
    ts, logs = zip(*points, strict=True)
    slope = float(np.polyfit(ts, logs, 1)[0])
    return 10 ** (slope / 2)


def _algorithm_settings(
    spec: ConvergenceSpec, problem: Problem, algorithm: str, mu: float
) -> dict[str, Any]:
    big_l, small = problem.curvature()
    if algorithm in ("dane", "fedprox"):
        return {"mu": mu}
    if algorithm == "admm":
        return {"rho": spec.rho if spec.rho is not None else math.sqrt(big_l * small)}
    if algorithm == "one-shot":
        return {"rounds": 1, "eval_every": 1}
    kappa = big_l / small
    if algorithm == "gd":
        return {"local_lr": 1.0 / big_l}
    # agd: Nesterov's constant momentum for a kappa-conditioned strongly convex function.
    return {"local_lr": 1.0 / big_l, "momentum": (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)}


def run_cell(
    client: Any,
    spec: ConvergenceSpec,
    problem: Problem,
    *,
    algorithm: str,
    machines: int,
    samples: int,
    seed: int,
    mu: float,
) -> dict[str, Any]:
    """Train one cell through the pipeline and score every iterate."""
    settings = _algorithm_settings(spec, problem, algorithm, mu)
    out = Path(spec.workdir) / "runs" / f"{algorithm}-m{machines}-N{samples}-mu{mu:g}-s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    config = _config(spec, problem.store, algorithm, seed=seed, out=str(out), **settings)
    w0 = initial_weights(prepare_run(config).spec, seed)
    subopt = [problem.suboptimality(w0)]
    comm_rounds = [0]
    callbacks = Callbacks(
        on_round=lambda row: comm_rounds.append(int(row["comm_rounds"])),
        on_weights=lambda t, w: subopt.append(problem.suboptimality(w)),
    )
    started = time.perf_counter()
    error = None
    try:
        train(config, callbacks=callbacks, client=client)
    except TrainingDiverged as err:
        error = str(err)
    wall_s = time.perf_counter() - started
    reached = next((t for t, s in enumerate(subopt) if s <= THRESHOLD), None)
    final = subopt[-1]
    cell: dict[str, Any] = {
        "algorithm": algorithm,
        "machines": machines,
        "samples": samples,
        "seed": seed,
        "mu": mu if algorithm in ("dane", "fedprox") else None,
        "eta": spec.eta if algorithm == "dane" else None,
        "settings": {k: v for k, v in settings.items() if k not in ("rounds", "eval_every")},
        "log10_suboptimality": [math.log10(s) if 0 < s < math.inf else None for s in subopt],
        "measured_rate": measured_rate(subopt),
        "spectral_radius": problem.dane_radius(spec.eta, mu) if algorithm == "dane" else None,
        "iterations_to_threshold": reached,
        "comm_rounds_to_threshold": comm_rounds[reached] if reached is not None else None,
        "comm_rounds_per_iteration": comm_rounds[1] if len(comm_rounds) > 1 else None,
        "diverged": error is not None or not math.isfinite(final) or final > subopt[0],
        "wall_s": wall_s,
    }
    return cell


def run_convergence(
    spec: ConvergenceSpec,
    *,
    client: Any | None = None,
    log: Callable[[str], None] = print,
    on_cell: Callable[[dict[str, Any]], None] = lambda partial: None,
) -> dict[str, Any]:
    """Run the whole grid on one cluster (started here, 2 workers, unless `client` is given).

    `on_cell` receives the result so far after every cell (the CLI writes it to --json, so
    an interrupted grid keeps what it finished).
    """
    from ..pipeline.cluster import make_client

    spec.validate()
    if client is None:
        with make_client(run_config(workers=2)) as started:
            return run_convergence(spec, client=started, log=log, on_cell=on_cell)
    samples_grid = spec.samples if spec.problem == "ridge" else (0,)
    cells: list[dict[str, Any]] = []
    for seed in range(spec.seeds):
        for machines in spec.machines:
            for samples in samples_grid:
                problem = prepare_problem(spec, machines=machines, samples=samples, seed=seed)
                samples = samples or problem.info.num_train
                for algorithm in spec.algorithms:
                    mus = spec.mus if algorithm in ("dane", "fedprox") else (0.0,)
                    for mu in mus:
                        cell = run_cell(
                            client,
                            spec,
                            problem,
                            algorithm=algorithm,
                            machines=machines,
                            samples=samples,
                            seed=seed,
                            mu=mu,
                        )
                        cells.append(cell)
                        log(_cell_line(cell))
                        on_cell(_result(spec, cells))
    return _result(spec, cells)


def _result(spec: ConvergenceSpec, cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "spec": asdict(spec),
        "threshold": THRESHOLD,
        "cells": list(cells),  # a snapshot: the caller may keep partial results
        "table": summarize(cells),
    }


def _cell_line(cell: dict[str, Any]) -> str:
    last = cell["log10_suboptimality"][-1]
    radius = cell["spectral_radius"]
    return (
        f"{cell['algorithm']:>8} m={cell['machines']:<3} N={cell['samples']:<6} "
        f"mu={cell['mu'] if cell['mu'] is not None else '-'} seed={cell['seed']}: "
        f"log10 subopt {last if last is None else round(last, 2)}, "
        f"rate {cell['measured_rate']:.4g}"
        + (f" (spectral radius {radius:.4g})" if radius is not None else "")
        + f", iterations to 1e-6 {cell['iterations_to_threshold']}, "
        f"diverged {cell['diverged']}, {cell['wall_s']:.1f} s"
    )


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (algorithm, m, N, mu): medians over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        key = (cell["algorithm"], cell["machines"], cell["samples"], cell["mu"])
        groups.setdefault(key, []).append(cell)
    rows = []
    for (algorithm, machines, samples, mu), group in groups.items():
        reached = [c["iterations_to_threshold"] for c in group]
        comm = [c["comm_rounds_to_threshold"] for c in group]
        radii = [c["spectral_radius"] for c in group if c["spectral_radius"] is not None]
        finals = [c["log10_suboptimality"][-1] for c in group]
        rows.append(
            {
                "algorithm": algorithm,
                "machines": machines,
                "samples": samples,
                "mu": mu,
                "seeds": len(group),
                "measured_rate": _median([c["measured_rate"] for c in group]),
                "spectral_radius": _median(radii) if radii else None,
                "iterations_to_threshold": _median_or_none(reached),
                "comm_rounds_to_threshold": _median_or_none(comm),
                "final_log10_suboptimality": _median(
                    [f if f is not None else math.inf for f in finals]
                ),
                "diverged": sum(c["diverged"] for c in group),
            }
        )
    return rows


def _median(values: list[float]) -> float:
    finite = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def _median_or_none(values: list[int | None]) -> float | None:
    """Median over seeds, with 'not reached' counted as infinitely many; None if that wins."""
    ranked = sorted(math.inf if v is None else v for v in values)
    middle = float(np.median(ranked))
    return None if math.isinf(middle) else middle


def markdown_table(result: dict[str, Any]) -> str:
    """The summary rows as a Markdown table; '> R (~T)' extrapolates T at the measured rate."""
    rounds = result["spec"]["rounds"]
    lines = [
        "| algorithm | m | N | mu | measured rate | spectral radius | iterations to 1e-6 | "
        "comm rounds to 1e-6 | final log10 subopt | diverged (seeds) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["table"]:

        def num(value: Any, fmt: str) -> str:
            return (
                "-"
                if value is None or (isinstance(value, float) and math.isnan(value))
                else format(value, fmt)
            )

        iterations = row["iterations_to_threshold"]
        not_reached = f"> {rounds}{_extrapolated(row, rounds)}"
        if row["algorithm"] == "one-shot":
            not_reached = "not reached (1 round)"
        lines.append(
            f"| {row['algorithm']} | {row['machines']} | {row['samples']} | "
            f"{num(row['mu'], 'g')} | {num(row['measured_rate'], '.4f')} | "
            f"{num(row['spectral_radius'], '.4f')} | "
            f"{num(iterations, 'g') if iterations is not None else not_reached} | "
            f"{num(row['comm_rounds_to_threshold'], 'g')} | "
            f"{num(row['final_log10_suboptimality'], '.2f')} | "
            f"{row['diverged']}/{row['seeds']} |"
        )
    return "\n".join(lines) + "\n"


def _extrapolated(row: dict[str, Any], rounds: int) -> str:
    """' (~T)': iterations to the threshold if the measured rate held on; '' if diverging."""
    rate, final = row["measured_rate"], row["final_log10_suboptimality"]
    if not (isinstance(rate, float) and 0 < rate < 1 and math.isfinite(final)):
        return ""
    more = (math.log10(THRESHOLD) - final) / (2 * math.log10(rate))
    return f" (~{rounds + math.ceil(more)})"


def plot(result: dict[str, Any], path: Path) -> None:
    """Suboptimality against iteration: rows = DANE's mu values (+ a row comparing the
    algorithms at the largest N), columns = m, one line per N (mean of log10 over seeds)."""
    from ..pipeline.report import pyplot, save_figure

    plt = pyplot()

    cells = result["cells"]
    machines = sorted({c["machines"] for c in cells})
    mus = sorted({c["mu"] for c in cells if c["algorithm"] == "dane"})
    others = sorted({c["algorithm"] for c in cells} - {"dane"})
    num_rows = len(mus) + (1 if others else 0)
    fig, axes = plt.subplots(
        num_rows, len(machines), figsize=(4 * len(machines), 3.2 * num_rows), squeeze=False
    )
    samples = sorted({c["samples"] for c in cells})
    for r, mu in enumerate(mus):
        for j, m in enumerate(machines):
            ax = axes[r][j]
            for n in samples:
                group = [
                    c
                    for c in cells
                    if (c["algorithm"], c["machines"], c["samples"], c["mu"]) == ("dane", m, n, mu)
                ]
                if group:
                    ax.plot(_mean_curve(group), marker=".", label=f"N={n}")
            ax.set_title(f"DANE, m={m}, mu={mu:g}")
            _decorate(ax, result["threshold"])
    if others:
        n = samples[-1]
        for j, m in enumerate(machines):
            ax = axes[-1][j]
            for algorithm in ["dane", *others]:
                for mu in mus if algorithm == "dane" else [None]:
                    group = [
                        c
                        for c in cells
                        if c["algorithm"] == algorithm
                        and c["machines"] == m
                        and c["samples"] == n
                        and (mu is None or c["mu"] == mu)
                    ]
                    if group:
                        label = algorithm if mu is None else f"dane mu={mu:g}"
                        ax.plot(_mean_curve(group), marker=".", label=label)
            ax.set_title(f"algorithms, m={m}, N={n}")
            _decorate(ax, result["threshold"])
    fig.tight_layout()
    save_figure(fig, path)


def _mean_curve(group: list[dict[str, Any]]) -> list[float]:
    length = max(len(c["log10_suboptimality"]) for c in group)
    curve = []
    for t in range(length):
        values = [
            c["log10_suboptimality"][t]
            for c in group
            if t < len(c["log10_suboptimality"]) and c["log10_suboptimality"][t] is not None
        ]
        curve.append(float(np.mean(values)) if values else math.nan)
    return curve


def _decorate(ax: Any, threshold: float) -> None:
    ax.axhline(math.log10(threshold), color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("iteration")
    ax.set_ylabel("log10(f(w_t) - f(w*))")
    ax.set_ylim(bottom=-16)
    ax.legend(fontsize=7)
