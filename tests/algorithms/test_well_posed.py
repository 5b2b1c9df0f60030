"""DANE's local problem well-posed by default on networks (issue 61): the unset mu and
local_theta by model, a bounded h_i, a large-K run that no longer collapses, the warning."""

from __future__ import annotations

import pytest
import torch

from dask_dane.pipeline.algorithms.parts.local_problem import LocalProblem
from dask_dane.pipeline.algorithms.parts.stop_rule import WARMUP_STEPS, SmoothedStop
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.shards import make_objective
from dask_dane.pipeline.observe.collapse import CollapseWatch, advice
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_state, prepare_run


@pytest.mark.parametrize(
    ("algorithm", "model", "mu", "theta"),
    [
        ("dane", "small-cnn", 0.1, 0.3),
        ("dane", "compact-cnn", 0.1, 0.3),
        ("dane", "linear", 0.0, 0.0),  # the paper's DANE, bit for bit
        ("dane", "logistic", 0.0, 0.0),
        ("feddyn", "small-cnn", 0.01, None),
        ("fedprox", "small-cnn", 0.0, None),  # bounded for any mu
    ],
)
def test_unset_mu_and_theta_take_the_models_values(algorithm, model, mu, theta):
    strategy = RunConfig(algorithm=algorithm, model=model).strategy

    assert strategy.mu == mu
    assert getattr(strategy, "local_theta", None) == theta


@pytest.mark.parametrize(("steps", "mu", "theta"), [(30, 0.01, 0.0), (300, 0.1, 0.3)])
def test_a_solve_of_more_than_four_passes_takes_the_stronger_mu_and_the_stop(
    digits_stores, steps, mu, theta
):
    # 2 shards of digits: 647 training rows each, 20 steps of 32 a pass: K = 30 is 1.5
    # passes, K = 300 is 15.
    config = RunConfig(store=str(digits_stores[2]), workers=2, local_steps=steps).validate()
    strategy = prepare_run(config).strategy

    assert (strategy.mu, strategy.local_theta) == (mu, theta)
    assert strategy.label().startswith(f"dane eta=1 mu={mu:g}" + (" theta=0.3" if theta else ""))


def test_sdane_still_asks_for_its_lam_no_default_trains_a_network():
    with pytest.raises(ValueError, match="sdane needs --mu above 0"):
        RunConfig(algorithm="sdane").validate()


def test_an_explicit_mu_is_kept_and_mu_0_is_the_papers_dane_without_a_stop():
    assert RunConfig(mu=0.0).strategy.local_theta == 0.0
    assert (RunConfig(mu=0.5).strategy.mu, RunConfig(mu=0.5).strategy.local_theta) == (0.5, 0.3)
    assert RunConfig(mu=0.05).strategy.local_theta == 0.0  # the stop goes with mu >= 0.1
    assert RunConfig(mu=0.0, local_theta=0.2).strategy.local_theta == 0.2
    # Unset stays unset in the settings (config.toml leaves it out, a resume resolves it again).
    assert RunConfig().mu is None and RunConfig().local_theta is None


def _tilted(store, mu: float) -> tuple[LocalProblem, torch.Tensor, torch.Tensor]:
    """Shard 0's DANE problem at the initial weights, and its tilt c = g_0 - g."""
    setup = prepare_run(RunConfig(store=str(store), workers=2).validate())
    weights, _ = initial_state(setup.spec, 0)
    shards = range(setup.store.num_shards)
    objectives = [make_objective(setup.spec, setup.load_train(i)) for i in shards]
    grads = [objective.loss_and_grad(weights)[1] for objective in objectives]
    tilt = grads[0] - sum(grads) / len(grads)
    return LocalProblem(objectives[0], linear=tilt, anchor=weights, mu=mu), weights, tilt


@pytest.mark.parametrize("steps", [30, 300])  # 1.5 and 15 passes: mu 0.01 and 0.1
def test_the_default_local_problem_of_a_network_is_bounded_below(digits_stores, steps):
    config = RunConfig(store=str(digits_stores[2]), workers=2, local_steps=steps).validate()
    mu = prepare_run(config).strategy.mu
    assert mu > 0
    problem, w, c = _tilted(digits_stores[2], mu)
    # f_i >= 0 (cross-entropy): h_i(v) >= -<c, w> - ||c||^2 / (2 mu) everywhere.
    bound = -float(c.dot(w)) - float(c.dot(c)) / (2 * mu)
    generator = torch.Generator().manual_seed(0)
    directions = [c / c.norm(), *(torch.randn(w.shape, generator=generator) for _ in range(3))]
    for direction in directions:
        direction = direction / direction.norm()
        values = [problem.value(w + t * direction)[0] for t in (0.1, 1.0, 10.0, 100.0)]
        assert min(values) >= bound
        # Far out the proximal term wins: h_i rises, it does not fall without bound.
        assert values[-1] > values[-2]


def test_a_solve_past_its_solution_stops_and_a_noisy_minibatch_does_not_stop_it():
    stop = SmoothedStop(bound=1.0, steps=300)
    rng = torch.Generator().manual_seed(0)
    # Minibatch gradients: mean of norm 0.5 under noise of norm about 3 per step.
    mean = torch.full((100,), 0.05)
    calls = [stop(mean + 0.3 * torch.randn(100, generator=rng), mean) for _ in range(200)]

    assert not any(calls[: WARMUP_STEPS - 1])  # no stop before the average spans its window
    assert not calls[WARMUP_STEPS - 1]  # one noisy minibatch is not a solved problem
    big = SmoothedStop(bound=1.0, steps=300)
    assert not any(big(torch.full((100,), 1.0), mean) for _ in range(50))  # norm 10: never
    short = SmoothedStop(bound=1.0, steps=8)  # a solve of 8 steps: the window is 4
    assert [short(torch.zeros(100), mean) for _ in range(5)] == [False] * 3 + [True] * 2


def _falls(accuracy: list[float]) -> float:
    """The largest fall (points) of a round below the best of the rounds before it."""
    return max(100 * (max(accuracy[:i]) - accuracy[i]) for i in range(1, len(accuracy)))


def test_dane_at_300_local_steps_no_longer_collapses_on_digits(digits_stores):
    def accuracy(**settings: float) -> list[float]:
        config = RunConfig(
            store=str(digits_stores[2]), workers=2, rounds=4, local_steps=300, **settings
        ).validate()
        ran = run_reference(prepare_run(config), rounds=4, num_workers=2)
        return [row["test_accuracy"] for row in ran.history]

    paper = accuracy(mu=0.0)  # the default before issue 61
    default = accuracy()

    assert _falls(paper) > 10  # collapsed: measured 96.4 % after round 1, then 83.6, 65.5 ...
    assert _falls(default) <= 2
    assert default[-1] >= 0.94


def test_a_collapse_is_said_once_with_the_setting_to_change():
    config = RunConfig(mu=0.0, local_steps=300)
    watch = CollapseWatch(advice(config))
    rows = [
        {"round": 1, "val_accuracy": 0.96, "test_accuracy": 0.95},
        {"round": 2, "val_accuracy": 0.93, "test_accuracy": 0.94},  # 3 points: noise
        {"round": 3, "val_accuracy": None, "test_accuracy": None},  # not evaluated
        {"round": 4, "val_accuracy": 0.55, "test_accuracy": 0.56},
        {"round": 5, "val_accuracy": 0.30, "test_accuracy": 0.31},
    ]
    lines = [watch.feed(row) for row in rows]

    assert lines[:3] == [None, None, None] and lines[4] is None
    assert lines[3] == (
        "warning: round 4's validation accuracy 0.5500 is 41.0 points below round 1's 0.9600: "
        "the local solves overshoot; raise --mu (now 0) to bound the local problem, or lower "
        "--local-steps (now 300) or --local-lr (now 0.05) (docs/explanation/algorithms.md)"
    )
    fedavg = CollapseWatch(advice(RunConfig(algorithm="fedavg")))
    fedavg.feed({"round": 1, "test_accuracy": 0.9})
    assert "lower --local-steps (now 30)" in fedavg.feed({"round": 2, "test_accuracy": 0.5})


def test_the_progress_lines_print_the_collapse_once():
    import io

    from rich.console import Console

    from dask_dane.pipeline.observe.progress import ProgressLines

    out = io.StringIO()
    lines = ProgressLines(Console(file=out, width=200))
    lines.begin(RunConfig(rounds=3, mu=0.0), resume=False)
    for number, accuracy in enumerate((0.9, 0.7, 0.6), start=1):
        lines.on_round({"round": number, "train_loss": 0.1, "test_accuracy": accuracy})

    warned = [line for line in out.getvalue().splitlines() if line.startswith("warning")]
    assert warned == [
        "warning: round 2's test accuracy 0.7000 is 20.0 points below round 1's 0.9000: the "
        "local solves overshoot; raise --mu (now 0) to bound the local problem, or lower "
        "--local-steps (now 30) or --local-lr (now 0.05) (docs/explanation/algorithms.md)"
    ]
