"""Per-shard figures of DANE's local solves (algorithms/parts/local_problem.py): their values on a
quadratic against numpy, and the `shards` list of the DANE and FedDyn rounds that ask for it
(--diagnostics-every N) in metrics.jsonl, with the training itself unchanged."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from dask_dane.pipeline.algorithms.parts.local_problem import (
    DIAGNOSTIC_ROWS,
    DIAGNOSTICS_EVERY,
    due,
    solve_diagnostics,
)
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.resumed import check_same_run
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


def test_diagnostics_are_due_every_nth_round_and_never_for_zero():
    assert [t for t in range(1, 10) if due(3, t)] == [3, 6, 9]  # as --eval-every counts
    assert [t for t in range(1, 10) if due(1, t)] == list(range(1, 10))
    assert not any(due(0, t) for t in range(1, 10))
    assert DIAGNOSTICS_EVERY.default == 0  # off unless asked for (measured: CHANGELOG)


def _dane(store, **settings) -> RunConfig:
    return RunConfig(
        store=str(store), model="small-cnn", rounds=4, local_steps=5, seed=1, **settings
    ).validate()


def test_dane_reports_each_shard_in_the_rounds_asked_for_and_the_weights_do_not_change(
    digits_stores,
):
    asked = run_reference(prepare_run(_dane(digits_stores[4], diagnostics_every=2)), rounds=4,
                          num_workers=2)  # fmt: skip
    never = run_reference(prepare_run(_dane(digits_stores[4])), rounds=4, num_workers=2)

    assert ["shards" in row for row in asked.history] == [False, True, False, True]
    for row in asked.history[1::2]:
        assert [s["shard"] for s in row["shards"]] == [0, 1, 2, 3]
        for shard in row["shards"]:
            assert shard["step_norm"] > 0 and shard["correction_norm"] > 0
            assert np.isfinite([shard[k] for k in shard]).all()
    assert not any("shards" in row for row in never.history)  # the default: never
    # On the cluster the rows carry the same figures in the same rounds: the dane-trust and
    # feddyn cases of tests/algorithms/test_algorithm_options.py (every round, every second round).
    # Forward passes on fixed rows only: the training itself is the same bit for bit.
    assert torch.equal(asked.weights, never.weights)
    assert [r["train_loss"] for r in asked.history] == [r["train_loss"] for r in never.history]


def test_feddyn_reports_each_shard_when_asked_and_other_algorithms_refuse_the_setting(
    digits_stores,
):
    feddyn = _dane(digits_stores[4], algorithm="feddyn", mu=0.1, diagnostics_every=1)
    rows = run_reference(prepare_run(feddyn), rounds=1, num_workers=2).history
    assert [s["shard"] for s in rows[0]["shards"]] == [0, 1, 2, 3]
    fedavg = RunConfig(store=str(digits_stores[4]), model="small-cnn", algorithm="fedavg")
    assert "shards" not in run_reference(prepare_run(fedavg.validate()), rounds=1,
                                         num_workers=2).history[0]  # fmt: skip
    with pytest.raises(ValueError, match="--diagnostics-every 2 applies to"):
        replace(fedavg, diagnostics_every=2).validate()
    with pytest.raises(ValueError, match="--diagnostics-every must be zero or positive"):
        _dane(digits_stores[4], diagnostics_every=-1)


def test_a_resume_may_ask_for_the_figures_or_stop_them():
    saved = {"store": "s.zarr", "diagnostics_every": 0}

    changes = check_same_run(saved, RunConfig(store="s.zarr", diagnostics_every=5))

    assert changes == {"diagnostics_every": (0, 5)}
