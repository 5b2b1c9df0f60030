"""The Strategy protocol: what every algorithm provides, as pure functions of data.

A round runs the strategy's phases in order. In phase p every shard computes `local(p, ...)`;
the outputs are averaged over shards (weighted by shard size); between phases `broadcast`
turns that average into what every shard receives next; after the last phase `update` gives
the new weights. Strategies hold hyperparameters only, so they pickle and travel as data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from dask_dane.pipeline.objective import ShardObjective

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class LocalOutput:
    """What one shard sends back in a phase; `tensors` count as communication, `metrics` not."""

    tensors: Tensors
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RoundUpdate:
    """The end of a round: new weights, new strategy state, and round metrics."""

    weights: torch.Tensor
    state: Tensors
    metrics: dict[str, float] = field(default_factory=dict)


class Strategy(Protocol):
    """One distributed optimisation algorithm (DANE, SGD, FedAvg, ...)."""

    name: str
    phases: tuple[str, ...]  # task-name prefixes, e.g. ("local_grad", "local_solve")

    def init_state(self, weights: torch.Tensor) -> Tensors:
        """Driver-side state before round 1 (e.g. a momentum buffer); {} if none."""
        ...

    def local(
        self,
        phase: int,
        objective: ShardObjective,
        weights: torch.Tensor,
        received: Tensors,
        previous: LocalOutput | None,
        rng: torch.Generator,
    ) -> LocalOutput:
        """One shard's work in `phase`; `previous` is the same shard's output of phase-1."""
        ...

    def broadcast(self, phase: int, weights: torch.Tensor, mean: LocalOutput) -> LocalOutput:
        """What every shard receives in phase+1 (tensors) and round metrics (e.g. grad_norm)."""
        ...

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        """The new weights from the average of the last phase."""
        ...
