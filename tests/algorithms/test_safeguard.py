"""DANE's safeguard: backtracking decisions, the halved step, its cost, Dask == reference."""

from __future__ import annotations

import json
import math

import pytest
import torch

from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.parts import safeguard as sg
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.parts.update_rule import UpdateRule
from dask_dane.pipeline.engine.protocol import LocalContext, LocalOutput, RoundEnd
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train

SOLVER = LocalSolver(local_steps=2, local_lr=0.1, batch_size=4)


def _state(*, anchor_loss: float, halvings: int = 0, mu: float = 0.0) -> sg.SafeguardState:
    return sg.SafeguardState(
        anchor=torch.tensor([1.0, 1.0, 1.0]),
        step=torch.tensor([2.0, 4.0, -8.0]),
        anchor_loss=anchor_loss,
        halvings=halvings,
        mu=mu,
    )


def _decide_and_update(dane, state, w, *, loss, solved=None):
    """DANE's round around the safeguard: broadcast (decides), local solve, update."""
    trial = dane.round_data(state)
    grads = LocalOutput(tensors={"grad": torch.ones(3)}, metrics={"train_loss": loss})
    sent = dane.broadcast(0, grads, trial)
    if solved is None:
        solved = dane.local(
            LocalContext(
                phase=1,
                round_index=1,
                objective=None,  # type: ignore[arg-type]
                weights=w,
                received=sent.tensors,
                previous=grads,
                rng=torch.Generator(),
                round_data=trial,
            )
        )
    end = RoundEnd(
        round_index=1,
        weights=w,
        mean=solved,
        broadcasts=(sent,),
        metrics={**grads.metrics, **sent.metrics},
        state=state,
        round_data=trial,
    )
    return sent, solved, dane.update(end)


def test_a_higher_loss_is_rejected_and_the_step_halved():
    decision = sg.decide(
        mode="backtrack", loss=2.5, anchor_loss=2.0, halvings=0, mu=0.05, base_mu=0.05
    )

    assert decision == sg.Decision(accept=False, halvings=1, mu=0.05)
    assert sg.backtracked(decision.halvings) == 0.5


def test_adaptive_mu_doubles_mu_on_rejection_and_relaxes_it_after_good_rounds():
    common = dict(mode="adaptive-mu", anchor_loss=2.0, base_mu=0.0)

    from_zero = sg.decide(loss=2.5, halvings=0, mu=0.0, **common)
    doubled = sg.decide(loss=2.5, halvings=1, mu=0.4, **common)
    after_backtrack = sg.decide(loss=1.5, halvings=2, mu=0.8, **common)
    relaxed = sg.decide(loss=1.5, halvings=0, mu=0.8, **common)

    assert (from_zero.accept, from_zero.mu) == (False, sg.MU_START)
    assert (doubled.halvings, doubled.mu) == (2, 0.8)
    assert (after_backtrack.accept, after_backtrack.halvings, after_backtrack.mu) == (True, 0, 0.8)
    assert relaxed.mu == pytest.approx(0.72)


def test_the_last_halving_is_accepted_and_nan_is_backtracked():
    last = sg.decide(
        mode="backtrack", loss=9.0, anchor_loss=2.0, halvings=sg.MAX_HALVINGS, mu=0, base_mu=0
    )
    nan = sg.decide(mode="backtrack", loss=math.nan, anchor_loss=2.0, halvings=0, mu=0, base_mu=0)

    assert last.accept and last.halvings == 0
    assert not nan.accept


def test_dane_skips_the_solve_and_moves_half_the_step_from_the_anchor():
    dane = Dane(eta=1.0, mu=0.0, solver=SOLVER, update_rule=UpdateRule(safeguard="backtrack"))
    w = torch.tensor([3.0, 5.0, -7.0])  # anchor + step, whose loss turned out higher

    sent, solved, update = _decide_and_update(dane, _state(anchor_loss=1.0), w, loss=1.5)

    assert sent.tensors == {}  # nothing is broadcast for a solve that would be thrown away
    assert solved.tensors == {} and solved.metrics == {}  # decided once: nothing to carry on
    assert torch.equal(update.weights, torch.tensor([2.0, 3.0, -3.0]))  # anchor + step / 2
    assert int(update.state.halvings) == 1
    assert float(update.state.anchor_loss) == 1.0
    assert update.metrics["safeguard_rejected"] == 1.0


def test_a_second_rejection_quarters_the_step():
    state = _state(anchor_loss=1.0, halvings=1)
    dane = Dane(eta=1.0, mu=0.0, solver=SOLVER, update_rule=UpdateRule(safeguard="backtrack"))
    w = torch.tensor([2.0, 3.0, -3.0])

    _, _, update = _decide_and_update(dane, state, w, loss=1.2)

    assert torch.equal(update.weights, torch.tensor([1.5, 2.0, -1.0]))  # anchor + step / 4


def test_an_accepted_round_makes_w_the_anchor_and_the_solves_the_next_step():
    dane = Dane(eta=1.0, mu=0.0, solver=SOLVER, update_rule=UpdateRule(safeguard="backtrack"))
    w = torch.tensor([3.0, 5.0, -7.0])
    v = torch.tensor([4.0, 5.0, -6.0])

    _, _, update = _decide_and_update(
        dane, _state(anchor_loss=1.0), w, loss=0.5, solved=LocalOutput(tensors={"weights": v})
    )

    assert torch.equal(update.weights, v)
    assert torch.equal(update.state.anchor, w)
    assert torch.equal(update.state.step, v - w)
    assert float(update.state.anchor_loss) == 0.5


def test_safeguard_needs_dane():
    with pytest.raises(ValueError, match="--algorithm dane"):
        RunConfig(algorithm="fedavg", safeguard="backtrack").validate()


@pytest.mark.cluster
def test_safeguarded_dask_run_equals_reference_and_counts_each_backtrack(
    digits_stores, cluster_client, tmp_path
):
    # A local step size large enough that rounds 4 and 5 raise the global loss (found by running
    # the reference, with the steps unclipped): both are backtracked, and the extra gradient
    # phases are counted.
    config = RunConfig(
        store=str(digits_stores[2]),
        out=str(tmp_path / "run"),
        algorithm="dane",
        model="small-cnn",
        rounds=5,
        local_steps=10,
        local_lr=0.3,
        batch_size=16,
        seed=7,
        safeguard="adaptive-mu",
        grad_sample=200,
        local_clip=0.0,
        mu=0.0,  # the paper's DANE, as found: adaptive-mu then starts mu at MU_START
    ).validate()
    num_params = initial_weights(prepare_run(config).spec, 0).numel()

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=config.rounds, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert (weights - reference.weights).abs().max() < 1e-5
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    rejected = [r["safeguard_rejected"] for r in rows]
    assert rejected == [h["safeguard_rejected"] for h in reference.history]
    assert rejected[3:5] == [1.0, 1.0]
    # The allgather collective (--broadcast auto, engine/round/transport.py): the weights are
    # already on both workers, and each phase sends each worker's partial sum to the other.
    # A full round: 2 gradient copies + 2 solution copies. A rejected one: only the gradient
    # phase at the backtracked weights.
    full, backtrack = 4 * num_params * 4, 2 * num_params * 4
    assert [r["comm_bytes"] for r in rows] == [backtrack if x else full for x in rejected]
    expected_rounds = [sum(1 if x else 2 for x in rejected[: i + 1]) for i in range(len(rows))]
    assert [r["comm_rounds"] for r in rows] == expected_rounds
    assert rows[4]["mu"] == 2 * sg.MU_START  # adaptive-mu doubled mu at the second rejection
