"""Rules for hyperparameters, the checks their declarations name (hyperparameters.py).

A field's rule lives in its declaration: `eta: float = declare(1.0, positive, help=...)`. A
class checks its own fields when it is built (`validate`), and the registry checks a run's
settings against every declared rule (algorithms.make_strategy), so a bad value is refused
even when the chosen algorithm would not use it. Each rule raises a SettingError naming the
field (its flag beside it) and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from .setting_error import SettingError, setting

Rule = Callable[[str, Any], None]


def validate(instance: Any) -> None:
    """Apply every declared field's rule to an instance's values."""
    for f in dataclasses.fields(instance):
        rule = getattr(f.metadata.get("declaration"), "rule", None)
        if rule is not None:
            rule(f.name, getattr(instance, f.name))


def _bad(name: str, problem: str) -> SettingError:
    """The error of a field's rule: the field (its flag beside it) and what is wrong."""
    return SettingError(f"{setting(name, with_flag=True)} {problem}")


def positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise _bad(name, f"must be a positive number (got {value})")


def non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise _bad(name, f"must be zero or positive (got {value})")


def at_least_one(name: str, value: int) -> None:
    if value < 1:
        raise _bad(name, f"must be at least 1 (got {value})")


def momentum_range(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0 <= value < 1):
        raise _bad(name, f"must be in [0, 1) (got {value})")


def relative_tolerance(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0 < value < 1):
        raise _bad(name, f"must be in (0, 1), a relative gradient norm (got {value}); e.g. 1e-10")


def rows_or_all(name: str, value: int) -> None:
    if value < 0:
        raise _bad(name, f"must be 0 (the full shard) or a number of rows (got {value})")


def one_of(*choices: str) -> Rule:
    def rule(name: str, value: str) -> None:
        if value not in choices:
            known = ", ".join(choices)
            named = setting(name, with_flag=True)
            raise SettingError(f"unknown {named} {value!r}; choose one of: {known}")

    return rule


def optional(rule: Rule) -> Rule:
    """`rule`, or unset (None: the setting's own default applies where it is used)."""

    def check(name: str, value: Any) -> None:
        if value is not None:
            rule(name, value)

    return check


def at_least(bound: float) -> Rule:
    def rule(name: str, value: float) -> None:
        if not (math.isfinite(value) and value >= bound):
            raise _bad(name, f"must be at least {bound:g} (got {value})")

    return rule


def count_or_off(name: str, value: int) -> None:
    if value < 0:
        raise _bad(name, f"must be 0 (off) or a positive count (got {value})")
