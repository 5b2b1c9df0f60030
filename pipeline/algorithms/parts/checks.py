"""Rules for hyperparameters, the checks their declarations name (hyperparameters.py).

A field's rule lives in its declaration: `eta: float = declare(1.0, positive, help=...)`. A
class checks its own fields when it is built (engine/protocol.py `validate`), and the registry
checks a run's settings against every declared rule (algorithms.make_strategy), so a bad value
is refused even when the chosen algorithm would not use it. Each rule raises a SettingError
naming the field (its flag beside it) and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .setting_error import SettingError, setting

Rule = Callable[[str, Any], None]


def make_rule(refused: Callable[[Any], bool], problem: str) -> Rule:
    """The rule that refuses a value where `refused` says so, naming the field (its flag
    beside it) and what is wrong: `problem`, {value} standing for the value."""

    def rule(name: str, value: Any) -> None:
        if refused(value):
            raise SettingError(f"{setting(name, with_flag=True)} {problem.format(value=value)}")

    return rule


def _finite(accepted: Callable[[Any], bool], problem: str) -> Rule:
    """The rule that refuses a value unless it is finite (not nan or inf) and `accepted`."""
    return make_rule(lambda v: not (math.isfinite(v) and accepted(v)), problem)


positive = _finite(lambda v: v > 0, "must be a positive number (got {value})")
non_negative = _finite(lambda v: v >= 0, "must be zero or positive (got {value})")
at_least_one = make_rule(lambda v: v < 1, "must be at least 1 (got {value})")
momentum_range = _finite(lambda v: 0 <= v < 1, "must be in [0, 1) (got {value})")
relative_tolerance = _finite(
    lambda v: 0 < v < 1, "must be in (0, 1), a relative gradient norm (got {value}); e.g. 1e-10"
)
rows_or_all = make_rule(
    lambda v: v < 0, "must be 0 (the full shard) or a number of rows (got {value})"
)
count_or_off = make_rule(lambda v: v < 0, "must be 0 (off) or a positive count (got {value})")


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
    return _finite(lambda v: v >= bound, f"must be at least {bound:g} (got {{value}})")
