"""What every algorithm class promises by its declaration, checked without training anything.

- Strategies, solvers, states and the aggregation's records are frozen, keyword-only
  dataclasses: they travel to the workers as data and nothing may change them on the way
  (a strategy mutated on one worker would train a different algorithm there), and fields
  are named, never positional, so that the registry builds them from settings by name.
- A field's default is the run settings' default for the same name (pipeline/settings.py):
  `check_settings` refuses an exclusive field of another algorithm set to anything but its
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

from dask_dane.pipeline import aggregate, comm
from dask_dane.pipeline import algorithms as algorithms_package
from dask_dane.pipeline.algorithms import ALGORITHMS
from dask_dane.pipeline.algorithms.exact_solver import ExactSolver
from dask_dane.pipeline.algorithms.local_solver import LocalProblem, LocalSolver
from dask_dane.pipeline.settings import AlgorithmSettings, RunSettings

# Frozen records that callers build positionally on purpose (the local problem's objective
# first), and one solve's own working state, which counts its passes in place and never
# leaves the solve.
POSITIONAL = {LocalProblem}
MUTABLE = {"_Exact"}


def _modules() -> list:
    names = [m.name for m in pkgutil.iter_modules(algorithms_package.__path__)]
    package = algorithms_package.__name__
    return [importlib.import_module(f"{package}.{name}") for name in names] + [aggregate, comm]


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
    assert {"Dane", "LocalSolver", "ShardReport", "Partial", "Layout", "LocalOutput"} <= names


# The algorithm section's defaults, and the run section's (the seed, which DANE, FedDyn and
# the diagnostics draw their fixed rows from).
SETTINGS_DEFAULTS = {
    f.name: f.default for section in (AlgorithmSettings, RunSettings)
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
    "cls", [*ALGORITHMS.values(), LocalSolver, ExactSolver], ids=lambda cls: cls.__qualname__
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
    assert cls.full_batch == (name in ("gd", "agd"))


def _default_strategy(name: str):
    from dask_dane.pipeline.algorithms import make_strategy

    settings = dataclasses.asdict(AlgorithmSettings())
    if name in ("sdane", "sdane-adaptive", "feddyn"):
        settings["mu"] = 0.1  # these need mu above 0
    if name in ("gd", "agd", "admm"):
        settings["local_solver"] = "cg"  # full-batch and exact solvers need exact solves
    return make_strategy(name, settings)
