"""One file per algorithm behind the Strategy protocol (base.py); a registry picks one.

`make_strategy(name, settings)` builds the algorithm's frozen dataclass from a run's
settings by field name: fields are named like the run's settings (eta, mu, local_lr, ...),
and a `solver` field takes the local solver those settings describe (solvers.py). Each class
checks its own hyperparameters, so a bad value is a SettingError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from .admm import Admm
from .agd import Agd
from .base import (
    Broadcast,
    LocalContext,
    LocalOutput,
    RoundEnd,
    RoundUpdate,
    Strategy,
    state_from_data,
    state_to_data,
)
from .dane import Dane
from .fedavg import FedAvg
from .feddyn import FedDyn
from .fedprox import FedProx
from .gd import Gd
from .oneshot import OneShot
from .parts import checks
from .parts.exact_solver import ExactSolver
from .parts.local_solver import LocalSolver
from .parts.setting_error import SettingError, setting
from .parts.solvers import make_solver
from .scaffold import Scaffold
from .sdane import Sdane, SdaneAdaptive
from .sgd import Sgd

ALGORITHMS: dict[str, type] = {
    cls.name: cls
    for cls in (
        Dane,
        Sdane,
        SdaneAdaptive,
        Sgd,
        FedAvg,
        FedProx,
        FedDyn,
        Scaffold,
        OneShot,
        Admm,
        Gd,
        Agd,
    )
}

__all__ = [
    "ALGORITHMS",
    "Broadcast",
    "LocalContext",
    "LocalOutput",
    "RoundEnd",
    "RoundUpdate",
    "SettingError",
    "Strategy",
    "check_settings",
    "make_strategy",
    "state_from_data",
    "state_to_data",
]


def make_strategy(algorithm: str, settings: Mapping[str, Any]) -> Strategy:
    """The Strategy `algorithm`, its hyperparameters taken from `settings` by field name.

    Every setting is checked first (check_settings), so a bad value is refused even where
    the chosen algorithm would not use it.
    """
    check_settings(algorithm, settings)
    strategy_type = ALGORITHMS[algorithm]
    values: dict[str, Any] = {}
    for f in fields(strategy_type):
        if f.name == "solver":
            values["solver"] = make_solver(settings)
        elif f.name in settings:
            values[f.name] = settings[f.name]
    return strategy_type(**values)


def check_settings(algorithm: str, settings: Mapping[str, Any]) -> None:
    """SettingError naming the first setting that breaks its field's rule.

    The rules are those the algorithms and solvers declare on their fields (checks.py). A
    setting that only another algorithm uses (an exclusive field there), set to anything but
    that field's default, is an error too: it would be silently ignored.
    """
    if algorithm not in ALGORITHMS:
        raise SettingError(
            f"unknown {setting('algorithm')} {algorithm!r}; choose one of: {', '.join(ALGORITHMS)}"
        )
    make_solver(settings)  # local_solver names a solver
    chosen = {f.name for f in fields(ALGORITHMS[algorithm])}
    for owner in (*ALGORITHMS.values(), LocalSolver, ExactSolver):
        for f in fields(owner):
            if f.name not in settings:
                continue
            checks.check_value(f, settings[f.name])
            exclusive = f.metadata.get("exclusive") and f.name not in chosen
            if exclusive and f.default is not MISSING and settings[f.name] != f.default:
                users = [name for name, cls in ALGORITHMS.items() if f.name in _names(cls)]
                raise SettingError(
                    f"{setting(f.name, settings[f.name])} applies to {setting('algorithm')} "
                    f"{' or '.join(users)} only; drop it or use {setting('algorithm', users[0])}"
                )


def _names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}
