"""One-shot averaging (Zhang, Duchi & Wainwright 2012): solve every shard, average once.

Legend: w = starting weights, v_i = argmin f_i (shard i's own minimiser).
One round: v_i = argmin_v f_i(v) from w; w <- mean_i v_i. Further rounds return the same
average (v_i does not depend on w when the solver is exact), so a run needs one round.
It is solve-and-average (parts/solve_and_average.py) under its own name and task prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .parts.solve_and_average import SolveAndAverage


@dataclass(frozen=True, kw_only=True)
class OneShot(SolveAndAverage):
    name: ClassVar[str] = "one-shot"
    phases: ClassVar[tuple[str, ...]] = ("local_solve",)
