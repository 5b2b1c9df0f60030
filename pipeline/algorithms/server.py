"""Server momentum (--server-momentum): heavy-ball acceleration of the averaged step.

Legend: w = weights at the start of the round, w_avg = the round's proposal (the mean of the
local solutions), m = the momentum of the averaged steps, beta = --server-momentum.
    m' = beta * m + (w_avg - w);    w' = w + m'
With beta = 0 it is the plain average. FedAvg with it is FedAvgM (Hsu, Qi & Brown 2019); on
DANE it is the momentum form of an accelerated outer loop. m is the driver state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class MomentumState:
    velocity: torch.Tensor  # m


def init_momentum(beta: float, weights: torch.Tensor) -> MomentumState | None:
    return MomentumState(velocity=torch.zeros_like(weights)) if beta else None


def momentum_step(
    beta: float, state: MomentumState | None, weights: torch.Tensor, proposal: torch.Tensor
) -> tuple[torch.Tensor, MomentumState | None]:
    """The new weights and state: the proposal itself without momentum (state None)."""
    if state is None:
        return proposal, None
    velocity = beta * state.velocity + (proposal - weights)
    return weights + velocity, MomentumState(velocity=velocity)


def momentum_label(beta: float) -> str:
    return f" server-momentum={beta:g}" if beta else ""
