"""--local-optimizer-state keep: a shard's local optimizer carries its momentum into its next round.

The oracle is a plain torch optimizer that never stops: two solves of K steps with the state
kept must be its 2K steps; reset, they are not.
"""

from __future__ import annotations

import pytest
import torch

from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline.algorithms import make_strategy
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem, LocalSolver
from dask_dane.pipeline.algorithms.parts.setting_error import SettingError
from dask_dane.pipeline.engine.round.shards import ShardData, make_objective

SPEC = ModelSpec(name="logistic", sample_shape=(4,), num_classes=3, dtype="float64")
ROWS = 12  # one batch of all rows: every step sees the same loss, as the oracle's


def _problem() -> tuple[LocalProblem, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(ROWS, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (ROWS,), generator=gen)
    objective = make_objective(SPEC, ShardData(index=0, x=x, y=y, task="classification"))
    size = sum(p.numel() for p in objective.model.parameters())
    start = torch.randn(size, generator=gen, dtype=torch.float64) * 0.1
    return LocalProblem(objective), start


def _oracle(problem: LocalProblem, start: torch.Tensor, optimizer: str, steps: int):
    v = start.clone().requires_grad_(True)
    if optimizer == "adam":
        opt = torch.optim.Adam([v], lr=0.05)
    else:
        opt = torch.optim.SGD([v], lr=0.05, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        problem.objective.batch_loss(v, torch.arange(ROWS)).backward()
        opt.step()
    return v.detach()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_kept_solves_are_one_optimizer_running_on(optimizer):
    problem, start = _problem()
    kept = LocalSolver(
        local_steps=5, local_lr=0.05, batch_size=ROWS, local_optimizer=optimizer,
        local_clip=0.0, local_optimizer_state="keep",
    )  # fmt: skip
    reset = LocalSolver(
        local_steps=5, local_lr=0.05, batch_size=ROWS, local_optimizer=optimizer, local_clip=0.0
    )
    rng = torch.Generator().manual_seed(0)

    first = kept.solve(problem, start, rng, state=kept.fresh_state(start))
    second = kept.solve(problem, first.weights, rng, state=first.state)
    restarted = reset.solve(problem, reset.solve(problem, start, rng).weights, rng)

    oracle = _oracle(problem, start, optimizer, steps=10)
    assert torch.allclose(second.weights, oracle, rtol=0, atol=1e-12)
    assert second.state.steps == 10 and first.state.steps == 5
    assert (restarted.weights - oracle).abs().max() > 1e-4  # a reset is not the same run
    assert reset.fresh_state(start) is None and restarted.state is None


def test_a_kept_state_is_not_changed_by_the_solve_that_reads_it():
    # A retried round starts again from the state recorded with its weights.
    problem, start = _problem()
    solver = LocalSolver(
        local_steps=3, batch_size=ROWS, local_clip=0.0, local_optimizer_state="keep"
    )
    rng = torch.Generator().manual_seed(0)
    first = solver.solve(problem, start, rng, state=solver.fresh_state(start))
    recorded = first.state.momentum.clone()
    solver.solve(problem, first.weights, rng, state=first.state)
    assert torch.equal(first.state.momentum, recorded)


def _strategy(algorithm: str, **settings):
    return make_strategy(algorithm, {"local_steps": 3, "local_optimizer_state": "keep", **settings})


@pytest.mark.parametrize("algorithm", ["dane", "fedavg", "fedprox"])
def test_the_local_methods_keep_one_state_per_shard(algorithm):
    strategy = _strategy(algorithm)
    state = strategy.init_shard_state(torch.zeros(7))
    assert strategy.shard_state_type is type(state)
    assert torch.equal(state.momentum, torch.zeros(7)) and state.steps == 0
    assert "kept-state" in strategy.label()
    assert _strategy(algorithm, local_optimizer_state="reset").shard_state_type is None


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (("scaffold", {}), "applies to dane, fedavg and fedprox"),
        (("feddyn", {}), "applies to dane, fedavg and fedprox"),
        (("dane", {"momentum": 0.0}), "keeps SGD's momentum, which is 0"),
        (("dane", {"local_solver": "lbfgs"}), "solves the local problem exactly"),
    ],
)
def test_keeping_is_refused_where_there_is_nothing_to_keep(settings, named):
    algorithm, own = settings
    with pytest.raises(SettingError, match=named):
        _strategy(algorithm, **own)
