"""FedProx (Li et al. 2020): FedAvg whose local objective adds (mu/2)||v - w||^2.

Legend: w = weights at the start of the round, v_i = shard i's local solution, mu = proximal
strength. One round: v_i ~ argmin_v f_i(v) + (mu/2)||v - w||^2 (K steps, or exact for convex
models); w <- mean_i v_i, or the server step on it (server.py).

Without the proximal term this is "solve locally, then average" (parts/solve_and_average.py):
FedAvg (K steps, fedavg.py) and one-shot averaging (exact solves, oneshot.py) are that, under
their own names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .parts.local_solver import MU
from .parts.server import SERVER_PART, ServerStep
from .parts.solve_and_average import SolveAndAverage


@dataclass(frozen=True, kw_only=True)
class FedProx(SolveAndAverage):
    mu: float = MU.field()
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)

    name: ClassVar[str] = "fedprox"

    @property
    def proximal_mu(self) -> float:
        return self.mu

    def label(self) -> str:
        return f"{self.name} mu={self.mu:g} {self.solver.label()}{self.server.label()}"
