"""Strategies on plain tensors, without a cluster: the math each one must do."""

from __future__ import annotations

import torch

from dask_dane.models.registry import ModelSpec, build_model
from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.fedavg import FedAvg
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.sgd import Sgd, SgdState
from dask_dane.pipeline.engine.round.aggregate import sendable, tree_reduce
from dask_dane.pipeline.engine.round.comm import layout
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.engine.round.shards import ShardData, make_objective
from dask_dane.pipeline.engine.round.tasks import (
    RoundInput,
    finish_phase,
    run_local,
    update_round,
)

SPEC = ModelSpec(name="mlp", sample_shape=(5,), num_classes=3, dtype="float64")


def _shards(sizes=(20, 20)) -> list[ShardData]:
    gen = torch.Generator().manual_seed(0)
    return [
        ShardData(
            index=i,
            x=torch.randn(n, 5, generator=gen, dtype=torch.float64),
            y=torch.randint(0, 3, (n,), generator=gen),
            task="classification",
        )
        for i, n in enumerate(sizes)
    ]


def _weights() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.cat([p.detach().reshape(-1) for p in build_model(SPEC).parameters()])


def _round_input(strategy, shards, state=None) -> RoundInput:
    return RoundInput(
        strategy=strategy,
        spec=SPEC,
        seed=1,
        index=1,
        layout=layout(["worker"] * len(shards)),
        num_shards=len(shards),
        round_data=strategy.round_data(state),
    )


def _round(strategy, shards, w, state=None):
    """One round in one process: local phases, pairwise sums, each phase ended, update."""
    state = state if state is not None else strategy.init_state(w)
    round_input = _round_input(strategy, shards, state)
    ended, previous = [], [None] * len(shards)
    for phase in range(len(strategy.phases)):
        received = ended[-1] if ended else None
        reports = [
            run_local(round_input, phase, s, w, received, previous[i]) for i, s in enumerate(shards)
        ]
        total = tree_reduce([sendable(r) for r in reports])
        if phase < len(strategy.phases) - 1:
            ended.append(finish_phase(round_input, phase, total, received, w))
        previous = reports
    return update_round(round_input, w, state, ended, total)


def test_dane_one_full_batch_step_moves_along_eta_times_global_gradient():
    # With one plain full-batch step from w, the local gradient is
    # grad f_i(w) - (grad f_i(w) - eta*g) = eta*g on every shard, so w_next = w - lr*eta*g.
    shards, w = _shards(), _weights()
    solver = LocalSolver(local_steps=1, local_lr=0.5, batch_size=1000, momentum=0.0)
    g = torch.stack([make_objective(SPEC, s).loss_and_grad(w)[1] for s in shards]).mean(0)

    update = _round(Dane(eta=0.7, mu=3.0, solver=solver), shards, w)

    torch.testing.assert_close(update.weights, w - 0.5 * 0.7 * g, rtol=0, atol=1e-12)


def test_dane_proximal_term_pulls_towards_the_start():
    shards, w = _shards(), _weights()
    # lr * mu = 0.5 keeps the proximal pull a contraction.
    solver = LocalSolver(local_steps=50, local_lr=0.05, batch_size=1000, momentum=0.0)

    loose = _round(Dane(eta=1.0, mu=0.0, solver=solver), shards, w).weights
    tight = _round(Dane(eta=1.0, mu=10.0, solver=solver), shards, w).weights

    assert (tight - w).norm() < 0.5 * (loose - w).norm()


def test_sgd_applies_momentum_to_the_averaged_gradient():
    shards, w = _shards(), _weights()
    strategy = Sgd(local_lr=0.1, batch_size=1000, momentum=0.9)
    g = torch.stack([make_objective(SPEC, s).loss_and_grad(w)[1] for s in shards]).mean(0)
    buffer = torch.full_like(w, 0.01)

    update = _round(strategy, shards, w, state=SgdState(momentum=buffer))

    torch.testing.assert_close(update.state.momentum, 0.9 * buffer + g)
    torch.testing.assert_close(update.weights, w - 0.1 * (0.9 * buffer + g))


def test_fedavg_averages_local_models_weighted_by_shard_size():
    shards, w = _shards(sizes=(10, 30)), _weights()
    strategy = FedAvg(solver=LocalSolver(local_steps=3, local_lr=0.1, batch_size=8))
    round_input = _round_input(strategy, shards)
    local = [run_local(round_input, 0, s, w, None, None).output for s in shards]

    update = _round(strategy, shards, w)

    expected = (10 * local[0].tensors["weights"] + 30 * local[1].tensors["weights"]) / 40
    torch.testing.assert_close(update.weights, expected)


def test_full_shard_gradient_matches_autograd_on_the_whole_shard():
    shard, w = _shards(sizes=(5000,))[0], _weights()
    objective: ShardObjective = make_objective(SPEC, shard)  # 5000 rows: 3 chunks

    loss, grad = objective.loss_and_grad(w)

    v = w.clone().requires_grad_(True)
    whole = objective.batch_loss(v, torch.arange(5000))
    whole.backward()
    assert abs(loss - float(whole.detach())) < 1e-12
    torch.testing.assert_close(grad, v.grad, rtol=1e-10, atol=1e-12)
