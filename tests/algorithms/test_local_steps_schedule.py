"""--local-steps-schedule (issue 34, item 2): K per round under QSR and post-local SGD, against
the papers' rules written out here, and the rows and communication a run records as they fall.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from dask_dane.pipeline.algorithms import SettingError
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.setup.config import RunConfig, in_flags
from dask_dane.pipeline.setup.run_setup import prepare_run


def _cosine(t: int, rounds: int) -> float:
    return 0.5 * (1 + math.cos(math.pi * (t - 1) / rounds))


def test_qsr_grows_k_as_the_inverse_square_of_the_decayed_rate():
    # Gu et al.'s rule H = floor((alpha / lr)^2) with alpha chosen so that the peak rate takes
    # K = 6: H_t = floor(6 / f_t^2), never below 6, capped at 40.
    solver = LocalSolver(local_steps=6, lr_schedule="cosine", rounds=10,
                         local_steps_schedule="qsr", local_steps_max=40)  # fmt: skip
    expected = [min(40, max(6, math.floor(6 / _cosine(t, 10) ** 2 + 1e-9))) for t in range(1, 11)]

    assert [solver.steps(t) for t in range(1, 11)] == expected
    assert expected[:2] == [6, 6] and expected[-1] == 40  # flat at first, the cap at the end
    assert expected == sorted(expected)
    # The step schedule: 1, then 0.1 after half the rounds (100 K, capped), 0.01 later.
    step = dataclasses.replace(solver, lr_schedule="step", local_steps_max=0)
    assert [step.steps(t) for t in (1, 5, 6, 8, 9)] == [6, 6, 96, 96, 96]  # 16 K, the default cap


def test_qsr_under_a_constant_rate_and_a_warm_up_is_constant():
    solver = LocalSolver(local_steps=5, rounds=8, local_steps_schedule="qsr", lr_warmup=4)

    assert [solver.steps(t) for t in range(1, 9)] == [5] * 8  # a warm-up is not decay


def test_post_local_takes_one_step_a_round_then_k():
    solver = LocalSolver(local_steps=7, local_steps_schedule="post-local", sync_rounds=3)

    assert [solver.steps(t) for t in range(1, 7)] == [1, 1, 1, 7, 7, 7]
    assert LocalSolver(local_steps=7).steps(1) == 7  # constant, the default


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(local_steps_max=50), "--local-steps-max applies to --local-steps-schedule qsr"),
        (dict(sync_rounds=2), "--sync-rounds applies to --local-steps-schedule post-local"),
        (dict(local_steps_schedule="post-local"), "needs --sync-rounds or --sync-epochs above 0"),
        (dict(local_steps_schedule="qsr", local_steps_max=10), "--local-steps-max is below"),
    ],
)
def test_a_schedules_setting_without_its_schedule_is_refused(settings, message):
    with pytest.raises(SettingError) as err:
        LocalSolver(local_steps=20, **settings)
    assert message in in_flags(err.value)


def test_a_run_reads_k_t_batches_a_shard_each_round_and_counts_each_round(small_least_squares):
    # FedAvg on 3 shards of 30 rows, batches of 8: round t reads K_t x 8 rows on each shard,
    # and each round is one communication round, however many steps it took.
    config = RunConfig(
        store=small_least_squares.path, model="linear", dtype="float64", algorithm="fedavg",
        local_steps=4, batch_size=8, rounds=6, lr_schedule="cosine",
        local_steps_schedule="qsr", local_steps_max=30,
    ).validate()  # fmt: skip
    steps = [min(30, max(4, math.floor(4 / _cosine(t, 6) ** 2 + 1e-9))) for t in range(1, 7)]

    history = run_reference(prepare_run(config), rounds=6, num_workers=2).history

    assert [row["images"] for row in history] == [k * 8 * 3 for k in steps]
    assert [row["comm_rounds"] for row in history] == [1, 2, 3, 4, 5, 6]
    assert steps == [4, 4, 7, 16, 30, 30]
