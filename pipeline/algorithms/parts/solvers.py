"""The local solvers an algorithm may take, and which one a run's settings ask for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .checks import one_of
from .exact_solver import EXACT_METHODS, ExactSolver
from .hyperparameters import build, declare, part
from .local_solver import LocalSolver
from .local_work import LocalWork
from .setting_error import SettingError, setting

# What algorithms accept as their local solver: K steps, or exact (convex models).
Solver = LocalSolver | ExactSolver
LOCAL_SOLVERS = ("steps", *EXACT_METHODS)


@dataclass(frozen=True, kw_only=True)
class SolverChoice:
    """Which solver a run asks for: the setting that picks between the solvers' types."""

    SECTION: ClassVar[str] = "solver"  # its settings' section ([solver], and its --help panel)

    local_solver: str = declare(
        "steps",
        one_of(*LOCAL_SOLVERS),
        help="steps (K steps) | lbfgs | cg (exact; convex models).",
    )


def make_solver(settings: Mapping[str, Any]) -> Solver:
    """--local-solver steps: K minibatch steps; lbfgs | cg: an exact solve (convex models)."""
    kind = settings.get("local_solver", SolverChoice().local_solver)
    one_of(*LOCAL_SOLVERS)("local_solver", kind)
    if kind != "steps" and settings.get("local_clip"):
        raise SettingError(
            f"{setting('local_clip')} clips the steps of {setting('local_solver', 'steps')}; "
            f"{kind} solves the local problem exactly: drop {setting('local_clip')} or use "
            f"{setting('local_solver', 'steps')}"
        )
    if kind != "steps" and settings.get("local_optimizer_state", "reset") != "reset":
        raise SettingError(
            f"{setting('local_optimizer_state')} keeps the optimizer of "
            f"{setting('local_solver', 'steps')}; {kind} solves the local problem exactly: "
            f"drop {setting('local_optimizer_state')}"
        )
    if settings.get("overhead_share") is not None:
        _check_overhead_share(settings, kind)
    if kind == "steps":
        return build(LocalSolver, settings)
    return build(ExactSolver, settings, local_solver=kind)


def _check_overhead_share(settings: Mapping[str, Any], kind: str) -> None:
    """--overhead-share chooses K: it refuses a second source of K and a solver without K."""
    if kind != "steps":
        raise SettingError(
            f"{setting('overhead_share')} chooses the K of {setting('local_solver', 'steps')}; "
            f"{kind} solves the local problem exactly: drop {setting('overhead_share')}"
        )
    if settings.get("local_epochs") is not None:
        raise SettingError(
            f"{setting('overhead_share')} and {setting('local_epochs')} both choose K (the "
            f"first from costs measured as the run starts); drop {setting('local_epochs')} or "
            f"{setting('overhead_share')}"
        )


# The metadata of the field an algorithm takes its local solver in:
# `solver: Solver = field(metadata=SOLVER_PART)`. LocalWork's setting chooses K for the steps.
SOLVER_PART = part(SolverChoice, LocalSolver, LocalWork, ExactSolver, builder=make_solver)
