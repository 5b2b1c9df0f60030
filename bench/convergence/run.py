"""`dane bench convergence`: the DANE paper's synthetic experiment, and its baselines.

For every cell (machines m, samples N, seed, and for DANE each mu) a store is prepared, the
algorithm is trained through the Dask pipeline (`training.train` on one shared cluster), and every
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
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ...pipeline.engine.run.callbacks import Callbacks
from ...pipeline.engine.run.errors import TrainingDiverged
from ...pipeline.setup.run_setup import initial_weights, prepare_run
from ...pipeline.training import train
from ..common.specs import run_config
from .problem import ConvergenceSpec, Problem, cell_config, prepare_problem
from .report import THRESHOLD, summarize

FLOOR = 1e-20  # suboptimalities below this are rounding noise: not used for rates


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
    config = cell_config(spec, problem.store, algorithm, seed=seed, out=str(out), **settings)
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
    from ...pipeline.launchers.cluster import make_client

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
