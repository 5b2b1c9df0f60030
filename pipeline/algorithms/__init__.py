"""One file per algorithm behind the Strategy protocol (engine/protocol.py); a registry picks one.

`make_strategy(name, settings)` builds the algorithm's frozen dataclass from a run's
settings: its declared fields are named like the run's settings (eta, mu, local_lr, ...), the
run's seed, rounds and shards reach the fields of those names (RUN_SETTINGS), and a part (its
local solver, its server step) is built from the same settings (parts/hyperparameters.py).
Each class checks its own hyperparameters, so a bad value is a SettingError naming the field.

A new algorithm is one file and one line: its class in ALGORITHMS below, or, from another
package, an entry point in the group `dask_dane.algorithms` (`toy = my_package.toy:Toy`).
Its declared hyperparameters become run settings, `dane train` flags and TOML keys
(`SETTINGS`, which pipeline/setup/settings.py turns into the algorithm section).

These modules import torch inside the functions that compute with it, and for annotations
only under TYPE_CHECKING: importing them declares the settings, which `dane train --help`
reads, and that must not wait seconds for torch (tests/cli/test_cli_conventions.py).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from ..engine.protocol import (
    Broadcast,
    LocalContext,
    LocalOutput,
    RoundEnd,
    RoundUpdate,
    Strategy,
    state_from_data,
    state_to_data,
)
from .admm import Admm
from .agd import Agd
from .dane import Dane
from .fedavg import FedAvg, FedProx, OneShot
from .feddyn import FedDyn
from .gd import Gd
from .parts.hyperparameters import Gathered, build, gather, setting_names
from .parts.setting_error import SettingError, setting
from .parts.solvers import make_solver
from .scaffold import Scaffold
from .sdane import Sdane, SdaneAdaptive
from .sgd import Sgd

BUILT_IN = (
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
PLUGIN_GROUP = "dask_dane.algorithms"  # entry points naming further Strategy classes


def _registry() -> dict[str, type]:
    """The built-in algorithms, then those installed packages register under PLUGIN_GROUP.

    A plugin that does not import, or names no new algorithm, is reported in one line and
    left out: one broken package must not stop every `dane` command (it then reads as an
    unknown --algorithm, with the known ones listed).
    """
    registry: dict[str, type] = {cls.name: cls for cls in BUILT_IN}
    for point in entry_points(group=PLUGIN_GROUP):
        where = f"the algorithm plugin {point.name} = {point.value} ({PLUGIN_GROUP})"
        try:
            cls = point.load()
        except Exception as err:  # whatever its import raised: report it, keep the rest
            logging.getLogger(__name__).warning(
                "%s does not import (%s: %s); it is left out", where, type(err).__name__, err
            )
            continue
        if getattr(cls, "name", None) != point.name or point.name in registry:
            logging.getLogger(__name__).warning(
                "%s must name a Strategy class whose `name` is %r, and no algorithm of that "
                "name may exist already; it is left out",
                where,
                point.name,
            )
            continue
        registry[point.name] = cls
    return registry


ALGORITHMS: dict[str, type] = _registry()
# Every hyperparameter the algorithms (and their parts) declare, each once: the run settings.
SETTINGS: dict[str, Gathered] = gather(ALGORITHMS.values())

# Names users type for an algorithm that is a setting of another: (what it is, the settings
# that give it). Refused with the settings to pass, so config.toml names the one algorithm.
ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "fedavgm": ("FedAvg with server momentum", {"algorithm": "fedavg", "server_momentum": 0.9}),
    "local-sgd": ("FedAvg (local SGD steps, weights averaged)", {"algorithm": "fedavg"}),
    "ddp": ("synchronous SGD (DistributedDataParallel's update)", {"algorithm": "sgd"}),
    "sync-sgd": ("synchronous SGD", {"algorithm": "sgd"}),
    "fedsgd": ("synchronous SGD (one averaged gradient step a round)", {"algorithm": "sgd"}),
}

__all__ = [
    "ALGORITHMS",
    "SETTINGS",
    "Broadcast",
    "LocalContext",
    "LocalOutput",
    "RoundEnd",
    "RoundUpdate",
    "SettingError",
    "Strategy",
    "make_strategy",
    "state_from_data",
    "state_to_data",
]


def make_strategy(algorithm: str, settings: Mapping[str, Any]) -> Strategy:
    """The Strategy `algorithm`, its hyperparameters taken from `settings` (`build`).

    Every setting is checked first against its declared rule, so a bad value is refused even
    where the chosen algorithm would not use it; so is a setting that only other algorithms
    use (an exclusive declaration) set to anything but its default: it would be ignored.
    """
    if algorithm not in ALGORITHMS:
        raise SettingError(_unknown_algorithm(algorithm))
    make_solver(settings)  # local_solver names a solver
    chosen = setting_names(ALGORITHMS[algorithm])
    for name, gathered in SETTINGS.items():
        if name not in settings:
            continue
        declaration = gathered.declaration
        value = settings[name]
        if declaration.rule is not None:
            declaration.rule(name, value)
        if declaration.exclusive and name not in chosen and value != declaration.default:
            users = [key for key, cls in ALGORITHMS.items() if name in setting_names(cls)]
            raise SettingError(
                f"{setting(name, value)} applies to {setting('algorithm')} "
                f"{' or '.join(users)} only; drop it or use {setting('algorithm', users[0])}"
            )
    return build(ALGORITHMS[algorithm], settings)


def _unknown_algorithm(algorithm: str) -> str:
    """The message for a name that is no algorithm: the settings an alias stands for, the
    algorithm a typo is near, or the list."""
    spelled = algorithm.lower().replace("_", "-")
    # Matched without dashes: local-sgd, localsgd, local_sgd and Local-SGD are one name.
    alias = {key.replace("-", ""): value for key, value in ALIASES.items()}.get(
        spelled.replace("-", "")
    )
    if alias is not None:
        meaning, settings = alias
        given = " ".join(setting(name, value) for name, value in settings.items())
        return f"{setting('algorithm', algorithm)} is {meaning}: pass {given}"
    known = ", ".join(ALGORITHMS)
    near = difflib.get_close_matches(spelled, ALGORITHMS, n=1, cutoff=0.75)
    if near:
        return (
            f"unknown {setting('algorithm')} {algorithm!r}; did you mean "
            f"{setting('algorithm', near[0])}? (algorithms: {known})"
        )
    return f"unknown {setting('algorithm')} {algorithm!r}; choose one of: {known}"
