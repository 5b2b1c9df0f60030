"""The local solvers an algorithm may take, and which one a run's settings ask for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from .checks import one_of
from .exact_solver import EXACT_METHODS, ExactSolver
from .local_solver import LocalSolver
from .setting_error import SettingError, setting

# What algorithms accept as their local solver: K steps, or exact (convex models).
Solver = LocalSolver | ExactSolver
LOCAL_SOLVERS = ("steps", *EXACT_METHODS)


def make_solver(settings: Mapping[str, Any]) -> Solver:
    """--local-solver steps: K minibatch steps; lbfgs | cg: an exact solve (convex models)."""
    kind = settings.get("local_solver", "steps")
    one_of(*LOCAL_SOLVERS)("local_solver", kind)
    if kind != "steps" and settings.get("local_clip"):
        raise SettingError(
            f"{setting('local_clip')} clips the steps of {setting('local_solver', 'steps')}; "
            f"{kind} solves the local problem exactly: drop {setting('local_clip')} or use "
            f"{setting('local_solver', 'steps')}"
        )
    solver_type = LocalSolver if kind == "steps" else ExactSolver
    names = {f.name for f in fields(solver_type) if f.name in settings}
    return solver_type(**{name: settings[name] for name in names})
