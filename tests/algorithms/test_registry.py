"""The algorithms' registry: flags map onto fields by name, every setting is checked by the
rule its field declares, labels and states belong to each algorithm."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dask_dane.pipeline.algorithms import ALGORITHMS, make_strategy
from dask_dane.pipeline.algorithms.parts.exact_solver import ExactSolver
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.parts.safeguard import SafeguardState
from dask_dane.pipeline.engine.protocol import state_from_data, state_to_data
from dask_dane.pipeline.setup.config import RunConfig


def _settings(**changes) -> dict:
    return RunConfig(**changes).as_dict()


def test_flags_map_onto_fields_of_the_same_name():
    settings = _settings(
        eta=0.5, mu=0.2, local_steps=7, local_lr=0.3, batch_size=9, momentum=0.4, rho=2.0
    )

    dane = make_strategy("dane", settings)
    sgd = make_strategy("sgd", settings)
    agd = make_strategy("agd", settings)
    admm = make_strategy("admm", settings)

    assert (dane.eta, dane.mu) == (0.5, 0.2)
    assert dane.solver == LocalSolver(
        local_steps=7, local_lr=0.3, batch_size=9, local_optimizer="sgd", momentum=0.4, rounds=20
    )  # rounds: the span of --lr-schedule
    assert (sgd.local_lr, sgd.batch_size, sgd.momentum) == (0.3, 9, 0.4)
    assert (agd.local_lr, agd.momentum) == (0.3, 0.4)  # momentum is Nesterov's beta there
    assert admm.rho == 2.0
    exact = make_strategy("one-shot", _settings(local_solver="lbfgs", local_tol=1e-6)).solver
    assert exact == ExactSolver(local_solver="lbfgs", local_tol=1e-6)


@pytest.mark.parametrize(
    ("algorithm", "change", "flag"),
    [
        ("sgd", {"local_tol": 0.0}, "--local-tol"),  # sgd takes no exact solver: still checked
        ("fedavg", {"eta": -1.0}, "--eta"),
        ("gd", {"local_optimizer": "rmsprop"}, "--local-optimizer"),
        ("agd", {"local_solver": "newton"}, "--local-solver"),
        ("dane", {"rho": 0.0}, "--rho"),
    ],
)
def test_every_setting_is_checked_whichever_algorithm_runs(algorithm, change, flag):
    with pytest.raises(ValueError, match=flag):
        make_strategy(algorithm, _settings(**change))


def test_a_flag_has_the_same_rule_in_every_class_that_takes_it():
    rules: dict[str, set] = {}
    for owner in (*ALGORITHMS.values(), LocalSolver, ExactSolver):
        for f in dataclasses.fields(owner):
            rule = getattr(f.metadata.get("declaration"), "rule", None)
            if rule is not None and f.name in RunConfig.__dataclass_fields__:
                rules.setdefault(f.name, set()).add(rule)
    assert rules and all(len(r) == 1 for r in rules.values()), rules


def test_fedavg_needs_local_steps_and_says_so():
    with pytest.raises(ValueError, match="fedavg takes K local steps"):
        make_strategy("fedavg", _settings(local_solver="cg"))


# Labels pinned word for word, with mu=0.5 and the other settings' defaults. An algorithm
# added to the registry needs no line here: the tests below label every registered one.
LABELS = {
    "dane": "dane eta=1 mu=0.5 theta=0.3 K=30 lr=0.05 clip=1 B=32",
    "sdane": "sdane mu=0.5 K=30 lr=0.05 clip=1 B=32",
    "sdane-adaptive": "sdane-adaptive mu=0.5 K=30 lr=0.05 clip=1 B=32",
    "sgd": "sgd lr=0.05 B=32",
    "fedavg": "fedavg K=30 lr=0.05 clip=1 B=32",
    "fedprox": "fedprox mu=0.5 K=30 lr=0.05 clip=1 B=32",
    "feddyn": "feddyn alpha=0.5 K=30 lr=0.05 clip=1 B=32",
    "scaffold": "scaffold K=30 lr=0.05 clip=1 B=32",
    "one-shot": "one-shot K=30 lr=0.05 clip=1 B=32",
    "admm": "admm rho=1 K=30 lr=0.05 clip=1 B=32",
    "gd": "gd lr=0.05",
    "agd": "agd lr=0.05 momentum=0.9",
}


def test_the_labels_pinned_here_are_of_registered_algorithms():
    assert LABELS and set(LABELS) <= set(ALGORITHMS)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_each_algorithm_labels_itself_with_its_own_settings(name):
    settings = _settings(mu=0.5)

    label = make_strategy(name, settings).label()
    others = {make_strategy(other, settings).label() for other in ALGORITHMS if other != name}

    assert label.split()[0] == name
    assert label not in others  # a label tells its algorithm apart
    if name in LABELS:
        assert label == LABELS[name]


def test_the_labels_name_the_options_set():
    exact = make_strategy("admm", _settings(local_solver="cg", rho=0.5)).label()
    options = _settings(
        grad_sample=500,
        grad_sample_growth=1.5,
        local_theta=0.2,
        server_momentum=0.9,
        lr_schedule="cosine",
    )

    assert exact == "admm rho=0.5 cg"
    assert make_strategy("dane", options).label() == (
        "dane eta=1 mu=0.1 grad-sample=500 growth=1.5 theta=0.2 K=30 lr=0.05 cosine clip=1 B=32 "
        "server-momentum=0.9"
    )
    skew = _settings(trust_radius=2.0, line_search=4)
    assert make_strategy("dane", skew).label() == (
        "dane eta=1 mu=0.1 theta=0.3 radius=2 line-search=4 K=30 lr=0.05 clip=1 B=32"
    )


def test_states_are_data_and_older_checkpoints_read_back():
    state = SafeguardState(
        anchor=torch.ones(3), step=torch.zeros(3), anchor_loss=1.5, halvings=2, mu=0.4
    )
    # Before states were dataclasses, checkpoints held the same keys with 0-dim tensors.
    older = {
        "anchor": torch.ones(3),
        "step": torch.zeros(3),
        "anchor_loss": torch.tensor(1.5, dtype=torch.float64),
        "halvings": torch.tensor(2),
        "mu": torch.tensor(0.4, dtype=torch.float64),
    }

    restored = state_from_data(SafeguardState, state_to_data(state))
    from_older = state_from_data(SafeguardState, older)

    for read in (restored, from_older):
        assert torch.equal(read.anchor, state.anchor) and torch.equal(read.step, state.step)
        assert (read.anchor_loss, read.halvings, read.mu) == (1.5, 2, 0.4)
        assert type(read.halvings) is int and type(read.mu) is float
    assert state_from_data(None, {}) is None and state_to_data(None) is None
    assert math.isinf(
        make_strategy("dane", _settings(safeguard="backtrack"))
        .init_state(torch.zeros(2))
        .anchor_loss
    )
