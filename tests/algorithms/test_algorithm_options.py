"""The options and algorithms that make DANE cheaper or faster (issue 12) or hold it on skewed
shards (issue 13): each checked by hand on tiny problems, then Dask against the reference,
with its communication counted."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dask_dane.pipeline.algorithms import make_strategy
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem, LocalSolver
from dask_dane.pipeline.algorithms.parts.schedule import lr_factor
from dask_dane.pipeline.algorithms.parts.server import MomentumState, momentum_step
from dask_dane.pipeline.engine.reference import ReferenceRun, run_reference
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

# --- by hand, single process -----------------------------------------------------------------


def test_lr_schedules_follow_their_formulas():
    assert [lr_factor("constant", t, 8) for t in (1, 8)] == [1.0, 1.0]
    cosine = [lr_factor("cosine", t, 4) for t in (1, 2, 3, 4)]
    assert cosine == pytest.approx(
        [1.0, (1 + np.cos(np.pi / 4)) / 2, 0.5, (1 + np.cos(3 * np.pi / 4)) / 2]
    )
    assert [lr_factor("step", t, 8) for t in (1, 4, 5, 6, 7, 8)] == pytest.approx(
        [1, 1, 0.1, 0.1, 0.01, 0.01]
    )
    # The names a user types are the names the schedule knows.
    for name in ("constant", "cosine", "step"):
        assert RunConfig(lr_schedule=name).validate().lr_schedule == name
    with pytest.raises(ValueError, match="--local-lr-schedule"):
        RunConfig(lr_schedule="linear").validate()


def test_server_momentum_is_the_heavy_ball_on_the_averaged_step():
    w, proposal = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 3.0])
    state = MomentumState(velocity=torch.tensor([0.2, -0.4]))

    weights, next_state = momentum_step(0.9, state, w, proposal)
    plain, none = momentum_step(0.9, None, w, proposal)

    velocity = 0.9 * torch.tensor([0.2, -0.4]) + (proposal - w)
    assert torch.allclose(next_state.velocity, velocity)
    assert torch.allclose(weights, w + velocity)
    assert torch.equal(plain, proposal) and none is None


def _quadratic_shard(n: int = 64, d: int = 5) -> ShardObjective:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    y = x @ torch.ones(d, dtype=torch.float64)
    return ShardObjective(torch.nn.Linear(d, 1, bias=False), x, y, "regression")


def test_a_local_solve_stops_where_its_rule_says_and_counts_what_it_read():
    objective = _quadratic_shard()
    solver = LocalSolver(local_steps=40, local_lr=0.05, batch_size=16, momentum=0.0)
    start = torch.zeros(5, dtype=torch.float64)

    full = solver.solve(LocalProblem(objective), start, torch.Generator().manual_seed(0))
    early = solver.solve(
        LocalProblem(objective),
        start,
        torch.Generator().manual_seed(0),
        stop=lambda grad, v: float(grad.norm()) < 1.0,
    )

    assert (full.steps, full.rows) == (40, 40 * 16)
    assert 1 <= early.steps < 40
    assert early.rows == (early.steps + 1) * 16  # the minibatch that met the rule was read
    # Up to the stop the two solves took the same steps.
    replay = LocalSolver(local_steps=early.steps, local_lr=0.05, batch_size=16, momentum=0.0)
    again = replay.solve(LocalProblem(objective), start, torch.Generator().manual_seed(0))
    assert torch.equal(again.weights, early.weights)


def test_the_gradient_sample_grows_by_its_factor_up_to_the_shard():
    dane = make_strategy(
        "dane", RunConfig(grad_sample=10, grad_sample_growth=2.0, seed=4).as_dict()
    )
    objective = _quadratic_shard(n=64)

    sizes = [dane.gradient.rows(objective, t).num_samples for t in (1, 2, 3, 4, 5)]
    first, third = dane.gradient.rows(objective, 1), dane.gradient.rows(objective, 3)

    assert sizes == [10, 20, 40, 64, 64]
    # Nested samples: round 3 reads round 1's rows and more.
    rows_1 = {tuple(r.tolist()) for r in first.x}
    rows_3 = {tuple(r.tolist()) for r in third.x}
    assert rows_1 < rows_3


# --- Dask against the reference --------------------------------------------------------------

CASES = {
    "dane-fast": dict(
        algorithm="dane",
        grad_sample=60,
        grad_sample_growth=2.0,
        local_theta=2.0,  # stops some solves early here (measured: 7.2, 4.5, 3.0 steps)
        server_momentum=0.5,
        lr_schedule="cosine",
    ),
    # K per round (--local-steps-schedule): QSR over the cosine's decay, capped at 32; post-local
    # SGD's one step a round for 2 rounds, then K.
    "fedavg-qsr": dict(
        algorithm="fedavg", lr_schedule="cosine", local_steps_schedule="qsr", local_steps_max=32
    ),
    "fedavg-post-local": dict(algorithm="fedavg", local_steps_schedule="post-local", sync_rounds=2),
    # binds here: steps 0.2-0.4 free; the step norms are the per-shard figures, every round
    "dane-trust": dict(algorithm="dane", trust_radius=0.05, diagnostics_every=1),
    "feddyn": dict(algorithm="feddyn", mu=0.1, diagnostics_every=2),  # figures in round 2 only
    "feddyn-clip": dict(algorithm="feddyn", mu=0.1, local_clip=0.5),  # skew-dane.toml's form
    "dane-line-search": dict(algorithm="dane", line_search=3, grad_sample=60),
    "scaffold": dict(algorithm="scaffold", momentum=0.0),
    "sdane": dict(algorithm="sdane", mu=2.0),
    "sdane-adaptive": dict(algorithm="sdane-adaptive", mu=2.0),
    "sgd-step": dict(algorithm="sgd", lr_schedule="step", local_lr=0.1),
}
# Options of the server's step alone, on FedAvg's graph: they change the update's arithmetic,
# which every worker takes from the same all-gathered sums, and nothing that crosses. dane-fast
# runs the momentum on the cluster above; the arithmetic is checked by hand
# (test_server_momentum_is_the_heavy_ball_on_the_averaged_step,
# tests/algorithms/test_server_step.py).
SERVER_CASES = {
    "fedavgm": dict(algorithm="fedavg", server_momentum=0.9),
    # DiLoCo's outer step (OpenDiLoCo's settings): Nesterov momentum 0.9, outer lr 0.7.
    "diloco": dict(algorithm="fedavg", server_momentum=0.9, server_nesterov=True, server_lr=0.7),
}
# Model-sized copies per round, 4 shards on 2 workers, in the round's all-gather: each
# worker sends the sum of its 2 shards' outputs to the other, per phase and per model-sized
# tensor; nothing is broadcast (every worker forms a phase's input itself). SCAFFOLD's
# solutions travel with its control update; S-DANE's solve phase sends x_i and grad f_i(x_i);
# DANE's line search sends only scalar losses.
COPIES = {
    "dane-fast": 4,
    "fedavgm": 2,
    "diloco": 2,
    "fedavg-qsr": 2,
    "fedavg-post-local": 2,
    "dane-trust": 4,
    "feddyn": 2,  # the tilt a_i stays on its shard
    "feddyn-clip": 2,
    "dane-line-search": 4,
    "scaffold": 4,
    "sdane": 6,
    "sdane-adaptive": 6,  # + a phase whose input (x) each worker forms, gathering grad f_i(x)
    "sgd-step": 2,
}


def _options_config(store, out: str, **settings) -> RunConfig:
    return RunConfig(
        store=str(store), out=out, model="small-cnn", dtype="float64", rounds=3, local_steps=8,
        batch_size=16, seed=11, **settings,
    ).validate()  # fmt: skip


@pytest.mark.parametrize("case", SERVER_CASES)
def test_a_server_step_option_reads_and_sends_what_fedavg_does_and_moves_other_weights(
    case, digits_stores
):
    def reference(settings: dict) -> ReferenceRun:
        config = _options_config(digits_stores[4], "", **settings)
        return run_reference(prepare_run(config), rounds=3, num_workers=2)

    plain, option = reference(dict(algorithm="fedavg")), reference(SERVER_CASES[case])

    setup = prepare_run(_options_config(digits_stores[4], ""))
    num_params = initial_weights(setup.spec, 0).numel()
    assert [r["comm_bytes"] for r in option.history] == [COPIES[case] * num_params * 8] * 3
    assert [r["comm_bytes"] for r in option.history] == [r["comm_bytes"] for r in plain.history]
    assert [r["images"] for r in option.history] == [r["images"] for r in plain.history]
    assert not torch.equal(option.weights, plain.weights)  # the option reached the update


@pytest.mark.cluster
@pytest.mark.parametrize("case", CASES)
def test_dask_run_equals_reference_and_counts_its_bytes(
    case, digits_stores, cluster_client, tmp_path
):
    config = RunConfig(
        store=str(digits_stores[4]),
        out=str(tmp_path / "run"),
        model="small-cnn",
        dtype="float64",
        rounds=3,
        local_steps=8,
        batch_size=16,
        seed=11,
        **CASES[case],
    ).validate()
    num_params = initial_weights(prepare_run(config).spec, 0).numel()

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert (weights - reference.weights).abs().max() < 1e-10
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    for row, expected in zip(rows, reference.history, strict=True):
        assert row["train_loss"] == pytest.approx(expected["train_loss"], rel=1e-12)
        assert row["images"] == expected["images"] > 0
        # Per-shard figures to the weights' own precision: a norm of the same float64 vector
        # can differ in its last bit between processes (SIMD reductions over buffers that
        # unpickling leaves at other alignments), as the weights may (1e-10 above).
        shards, expected_shards = row.get("shards"), expected.get("shards")
        assert (shards is None) == (expected_shards is None)
        for got, want in zip(shards or [], expected_shards or [], strict=True):
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert [r["comm_bytes"] for r in rows] == [COPIES[case] * num_params * 8] * 3
    assert rows[-1]["cum_images"] == sum(r["images"] for r in rows)
    # K_t x B rows on each of the 4 shards, one communication round each, as they fell:
    # cosine factors 1, 0.75, 0.25 give K = 8, floor(8 / 0.75^2) = 14, then 128 capped at 32.
    steps = {"fedavg-qsr": [8, 14, 32], "fedavg-post-local": [1, 1, 8]}.get(case)
    if steps:
        assert [r["images"] for r in rows] == [k * 16 * 4 for k in steps]
        assert [r["comm_rounds"] for r in rows] == [1, 2, 3]
    if case == "dane-line-search":
        assert all(r["line_search_step"] in (2.0, 1.0, 0.5) for r in rows)
        assert [r["comm_rounds"] for r in rows] == [3, 6, 9]
    if case == "dane-trust":  # every shard's solve ended on the region's sphere
        steps = [s["step_norm"] for r in rows for s in r["shards"]]
        assert steps == pytest.approx([0.05] * 12, rel=1e-5)
    if case == "dane-fast":  # the stopping rule cut the solves short: fewer images read
        assert any(1 <= r["local_steps"] < 8 for r in rows)
        assert [r["grad_rows"] for r in rows] == [60, 120, 240]
