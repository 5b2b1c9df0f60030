"""What every algorithm class promises by its declaration, checked without training anything.

- Strategies, solvers, states and the aggregation's records are frozen, keyword-only
  dataclasses: they travel to the workers as data and nothing may change them on the way
  (a strategy mutated on one worker would train a different algorithm there), and fields
  are named, never positional, so that the registry builds them from settings by name.
- A field's default is the run settings' default for the same name (pipeline/setup/settings.py):
  `make_strategy` refuses an exclusive field of another algorithm set to anything but its
  default, so a default that differs from the settings' would refuse every plain run.
- Each registered name is the class's own `name`, and each strategy lists its phases.

These are the checks mutation testing showed missing: a mutant turning `frozen=True` off or
changing a default survived every test that trains (tests/mutation/, docs/testing.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

from dask_dane.pipeline import algorithms as algorithms_package
from dask_dane.pipeline.algorithms import ALGORITHMS
from dask_dane.pipeline.algorithms.parts.exact_solver import ExactSolver
from dask_dane.pipeline.algorithms.parts.hyperparameters import setting_names
from dask_dane.pipeline.algorithms.parts.local_solver import LocalProblem, LocalSolver
from dask_dane.pipeline.algorithms.parts.server import ServerStep
from dask_dane.pipeline.engine import protocol
from dask_dane.pipeline.engine.round import aggregate, comm
from dask_dane.pipeline.setup.settings import (
    AlgorithmSettings,
    RunSettings,
    ServerSettings,
    SolverSettings,
)

# Frozen records that callers build positionally on purpose (the local problem's objective
# first), and one solve's own working state, which counts its passes in place and never
# leaves the solve.
POSITIONAL = {LocalProblem}
MUTABLE = {"_Exact"}


def _modules() -> list:
    # The algorithms and, below them, the parts they share (parts/), and the protocol's records.
    prefix = algorithms_package.__name__ + "."
    names = [m.name for m in pkgutil.walk_packages(algorithms_package.__path__, prefix)]
    return [importlib.import_module(name) for name in names] + [protocol, aggregate, comm]


def _dataclasses() -> list[type]:
    found = {
        cls
        for module in _modules()
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    }
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


@pytest.mark.parametrize("cls", _dataclasses(), ids=lambda cls: cls.__qualname__)
def test_every_record_is_a_frozen_keyword_only_dataclass(cls):
    params = cls.__dataclass_params__
    assert params.frozen != (cls.__qualname__ in MUTABLE), f"{cls.__qualname__}: frozen"
    if cls not in POSITIONAL and cls.__qualname__ not in MUTABLE:
        assert all(f.kw_only for f in dataclasses.fields(cls)), f"{cls.__qualname__}: kw_only"


def test_there_are_records_to_check():
    names = {cls.__qualname__ for cls in _dataclasses()}
    assert {"Dane", "LocalSolver", "Partial", "Layout", "LocalOutput"} <= names


# The algorithm's three sections' defaults, and the run section's (the seed, which DANE,
# FedDyn and the diagnostics draw their fixed rows from).
SETTINGS_DEFAULTS = {
    f.name: f.default
    for section in (AlgorithmSettings, SolverSettings, ServerSettings, RunSettings)
    for f in dataclasses.fields(section)
}  # fmt: skip


# `rounds` is a schedule's span, which the registry always passes from the run; a solver
# built by hand defaults to one round (no schedule to speak of), not to a run's 20.
NOT_A_SETTING_DEFAULT = {"rounds"}


def _defaults(cls: type) -> list[tuple[str, object]]:
    return [
        (f.name, f.default)
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING
        and f.name in SETTINGS_DEFAULTS
        and f.name not in NOT_A_SETTING_DEFAULT
    ]


@pytest.mark.parametrize(
    "cls",
    [*ALGORITHMS.values(), LocalSolver, ExactSolver, ServerStep],
    ids=lambda cls: cls.__qualname__,
)
def test_every_default_is_the_run_settings_default(cls):
    defaults = _defaults(cls)
    for name, default in defaults:
        assert default == SETTINGS_DEFAULTS[name], f"{cls.__qualname__}.{name}"
        assert type(default) is type(SETTINGS_DEFAULTS[name]), f"{cls.__qualname__}.{name}"


def test_the_defaults_checked_are_many():
    checked = {name for cls in ALGORITHMS.values() for name, _ in _defaults(cls)}
    checked |= {name for name, _ in _defaults(LocalSolver)}
    assert len(checked) >= 12, checked


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_registered_name_is_its_class_name_and_phases_are_named(name):
    cls = ALGORITHMS[name]
    assert cls.name == name
    strategy = _default_strategy(name)
    assert strategy.phases and all(p.startswith("local_") for p in strategy.phases)
    assert len(set(strategy.phases)) == len(strategy.phases)
    # An algorithm that declares no batch size takes no minibatch steps (protocol.py).
    assert cls.full_batch == ("batch_size" not in setting_names(cls))


# What an algorithm needs beyond the defaults here, set after a test's own settings: mu above
# 0, and exact solves for the full-batch and exact methods. Every other registered algorithm
# is built from the defaults alone.
BEYOND_DEFAULTS = {
    "sdane": {"mu": 0.1}, "sdane-adaptive": {"mu": 0.1}, "feddyn": {"mu": 0.1},
    "gd": {"local_solver": "cg"}, "agd": {"local_solver": "cg"}, "admm": {"local_solver": "cg"},
}  # fmt: skip


def test_the_exceptions_are_of_registered_algorithms():
    assert set(BEYOND_DEFAULTS) <= set(ALGORITHMS)


def _default_strategy(name: str, **overrides):
    from dask_dane.pipeline.algorithms import make_strategy

    generated = (AlgorithmSettings(), SolverSettings(), ServerSettings())
    settings = {k: v for section in generated for k, v in dataclasses.asdict(section).items()}
    return make_strategy(name, settings | overrides | BEYOND_DEFAULTS.get(name, {}))


# (algorithm, settings beyond the defaults): the states each one keeps. Every registered
# algorithm with its defaults, and the options that add a state.
VARIANTS = [(name, {}) for name in ALGORITHMS] + [
    ("dane", {"server_momentum": 0.5}), ("dane", {"safeguard": "backtrack"}),
    ("fedavg", {"server_momentum": 0.5}), ("fedprox", {"server_momentum": 0.5}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "settings"), VARIANTS, ids=lambda v: str(v))
def test_each_strategys_state_types_are_those_of_its_initial_states(name, settings):
    # Checkpoints rebuild states from their declared types (state_from_data): a declared
    # type that is not the initial state's would lose the state on --resume.
    import torch

    strategy = _default_strategy(name, **settings)
    weights = torch.zeros(5, dtype=torch.float64)
    state, shard_state = strategy.init_state(weights), strategy.init_shard_state(weights)
    assert strategy.state_type is (None if state is None else type(state))
    assert strategy.shard_state_type is (None if shard_state is None else type(shard_state))


def test_the_protocols_optional_parts_default_to_none():
    # A strategy tells "no state" and "no decision" by None; "" or 0 would read as present.
    from dask_dane.pipeline.engine import protocol as base

    optional = {
        base.LocalContext: ("shard_state", "round_data"), base.Broadcast: ("decision",),
        base.RoundEnd: ("state", "round_data"), base.RoundUpdate: ("state",),
        base.LocalOutput: ("shard_state",),
    }  # fmt: skip
    for cls, names in optional.items():
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        assert all(defaults[name] is None for name in names), cls.__qualname__
    assert base.Strategy.state_type is None
    assert base.Strategy.shard_state_type is None


def _exclusive_fields() -> dict[str, list[tuple[type, dataclasses.Field]]]:
    """Each setting's (algorithm, field) pairs, the fields of the algorithms' parts included
    (the server step's settings are fields of the part the local methods take)."""
    from dask_dane.pipeline.algorithms.parts.hyperparameters import declared_fields

    owners: dict[str, list[tuple[type, dataclasses.Field]]] = {}
    for cls in ALGORITHMS.values():
        for f, _holder in declared_fields(cls):
            owners.setdefault(f.name, []).append((cls, f))
    return owners


def test_every_owner_of_a_setting_agrees_whether_it_is_exclusive():
    for name, owners in _exclusive_fields().items():
        flags = {f.metadata["declaration"].exclusive for _cls, f in owners}
        assert len(flags) == 1, f"{name}: exclusive on some of {owners} only"


# A value other than its default for each exclusive setting the built-in algorithms declare.
# One that a new algorithm declares takes its default's negation (a flag) or its default plus
# one (a number), unless it is given here.
EXCLUSIVE_VALUES = {
    "grad_sample": 10, "grad_sample_growth": 2.0, "local_theta": 1.0, "trust_radius": 1.0,
    "line_search": 2, "safeguard": "backtrack", "correction": "shrink", "server_lr": 2.0,
    "server_lr_rule": "fedexp", "server_nesterov": True, "grad_sample_local": 1.0,
    "server_momentum_delay": 1, "server_momentum_delay_epochs": 1.0, "diagnostics_every": 1,
    "overhead_share": 0.1,
}  # fmt: skip


def _other_value(name: str, default: object) -> object:
    if name in EXCLUSIVE_VALUES:
        return EXCLUSIVE_VALUES[name]
    if isinstance(default, bool):
        return not default
    assert isinstance(default, int | float), f"give the exclusive {name} a value: EXCLUSIVE_VALUES"
    return default + 1


def test_an_exclusive_setting_is_refused_by_every_algorithm_without_it():
    from dask_dane.pipeline.algorithms import SettingError, make_strategy

    declared = {
        name: owners[0][1].metadata["declaration"] for name, owners in _exclusive_fields().items()
    }
    exclusive = {name for name, declaration in declared.items() if declaration.exclusive}
    assert set(EXCLUSIVE_VALUES) <= exclusive, exclusive
    for name, owners in _exclusive_fields().items():
        if name not in exclusive:
            continue
        value = _other_value(name, declared[name].default)
        for algorithm, cls in ALGORITHMS.items():
            if cls in {owner for owner, _f in owners}:
                continue
            settings = {**dataclasses.asdict(AlgorithmSettings()), name: value}
            with pytest.raises(SettingError, match="applies to"):
                make_strategy(algorithm, settings)


def test_the_rules_accept_the_values_at_their_edges_and_refuse_those_past_them():
    from dask_dane.pipeline.algorithms import SettingError
    from dask_dane.pipeline.algorithms.parts import checks

    accepted = [
        (checks.positive, 1e-9), (checks.positive, 0.5), (checks.non_negative, 0.0),
        (checks.at_least_one, 1), (checks.momentum_range, 0.0), (checks.momentum_range, 0.5),
        (checks.momentum_range, 0.999), (checks.relative_tolerance, 0.5),
        (checks.rows_or_all, 0), (checks.rows_or_all, 1), (checks.count_or_off, 0),
        (checks.at_least(1.0), 1.0),
    ]  # fmt: skip
    refused = [
        (checks.positive, 0.0), (checks.positive, float("inf")), (checks.non_negative, -1e-9),
        (checks.at_least_one, 0), (checks.momentum_range, 1.0), (checks.momentum_range, -0.1),
        (checks.relative_tolerance, 1.0), (checks.relative_tolerance, 0.0),
        (checks.rows_or_all, -1), (checks.count_or_off, -1), (checks.at_least(1.0), 0.99),
    ]  # fmt: skip
    for rule, value in accepted:
        rule("x", value)
    for rule, value in refused:
        with pytest.raises(SettingError):
            rule("x", value)
