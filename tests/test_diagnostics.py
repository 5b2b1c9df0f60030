"""Per-shard figures of DANE's local solves (algorithms/diagnostics.py): their values on a
quadratic against numpy, and the `shards` list of every DANE round in metrics.jsonl."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dask_dane.pipeline.algorithms.parts.diagnostics import DIAGNOSTIC_ROWS, solve_diagnostics
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem
from dask_dane.pipeline.round.objective import ShardObjective
from dask_dane.pipeline.run.reference import run_reference
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run


def _least_squares(n: int, d: int = 4) -> tuple[ShardObjective, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((n, d)), rng.standard_normal(n)
    model = torch.nn.Linear(d, 1, bias=False).double()
    objective = ShardObjective(model, torch.tensor(x), torch.tensor(y), "regression", l2=0.1)
    return objective, x, y


def test_the_figures_of_a_solve_are_its_tilt_its_step_and_h_i_and_f_i_at_both_ends():
    objective, x, y = _least_squares(n=40)
    w = torch.tensor([0.5, -1.0, 0.0, 2.0], dtype=torch.float64)
    v = torch.tensor([0.3, -0.2, 0.1, 1.0], dtype=torch.float64)
    c = torch.tensor([0.2, 0.0, -0.4, 0.1], dtype=torch.float64)
    problem = LocalProblem(objective, linear=c, anchor=w, mu=0.5)

    figures = solve_diagnostics(problem, w, v, seed=0)

    def f(u):  # mean squared error plus lambda ||u||^2
        return np.mean((x @ u - y) ** 2) + 0.1 * u @ u

    w_, v_, c_ = w.numpy(), v.numpy(), c.numpy()
    assert figures["correction_norm"] == pytest.approx(np.linalg.norm(c_))
    assert figures["step_norm"] == pytest.approx(np.linalg.norm(v_ - w_))
    assert figures["shard_loss_start"] == pytest.approx(f(w_))
    assert figures["shard_loss_end"] == pytest.approx(f(v_))
    assert figures["local_loss_start"] == pytest.approx(f(w_) - c_ @ w_)
    h_end = f(v_) - c_ @ v_ + 0.25 * np.sum((v_ - w_) ** 2)
    assert figures["local_loss_end"] == pytest.approx(h_end)


def test_a_large_shard_is_measured_on_its_fixed_sample():
    objective, _, _ = _least_squares(n=3 * DIAGNOSTIC_ROWS)
    w = torch.zeros(4, dtype=torch.float64)
    problem = LocalProblem(objective)

    first = solve_diagnostics(problem, w, w + 1, seed=3)
    again = solve_diagnostics(problem, w, w + 1, seed=3)
    other = solve_diagnostics(problem, w, w + 1, seed=4)

    sample = objective.fixed_sample(DIAGNOSTIC_ROWS, 3)
    assert sample.num_samples == DIAGNOSTIC_ROWS
    assert first == again  # the same rows every round
    assert first["shard_loss_end"] == pytest.approx(sample.loss(w + 1))
    assert first["shard_loss_end"] != other["shard_loss_end"]
    assert first["correction_norm"] == 0.0  # no tilt: FedAvg's local problem


def test_every_dane_round_reports_each_shard(digits_stores):
    config = RunConfig(
        store=str(digits_stores[4]), model="small-cnn", rounds=2, local_steps=5, seed=1
    ).validate()

    history = run_reference(prepare_run(config), rounds=2, num_workers=2).history

    for row in history:
        assert [s["shard"] for s in row["shards"]] == [0, 1, 2, 3]
        for shard in row["shards"]:
            assert shard["step_norm"] > 0 and shard["correction_norm"] > 0
            assert np.isfinite([shard[k] for k in shard]).all()
    fedavg = RunConfig(store=str(digits_stores[4]), model="small-cnn", algorithm="fedavg")
    rows = run_reference(prepare_run(fedavg.validate()), rounds=1, num_workers=2).history
    assert "shards" not in rows[0]  # only DANE reports them so far
