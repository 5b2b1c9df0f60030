"""The Strategy protocol: what every algorithm provides, as pure functions of data.

A round runs the strategy's phases in order. In phase p every shard computes `local(p, ...)`;
the outputs are averaged over shards (weighted by shard size); between phases `broadcast`
turns that average into what every shard receives next; after the last phase `update` gives
the new weights. Strategies hold hyperparameters only, so they pickle and travel as data.

Per-shard state (ADMM's dual variables): some algorithms keep, for every shard, tensors that
only that shard uses and that outlive a round. Such state is data too: `init_shard_state`
gives its start, every phase of round t receives the shard's state as round t started, and the
last phase returns the state for round t+1 in `LocalOutput.shard_state`. The pipeline keeps
the list of shard states next to the driver's `state` (so checkpoints and retries after a lost
worker see it, and the reference runner keeps the same list), sends each shard its own entry
and counts none of it as communication: in a deployment it would stay on the shard's machine.
We chose this over folding it into the driver `state` keyed by shard because the averaged
phases never hand the driver any single shard's output, and over state that lives only on
workers between rounds because a lost worker or a resumed run would then lose the duals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..objective import ShardObjective

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class LocalOutput:
    """What one shard sends back in a phase; `tensors` count as communication, `metrics` not.

    `shard_state` (last phase only) is the shard's own state for the next round: it is neither
    averaged nor counted as communication.
    """

    tensors: Tensors
    metrics: dict[str, float] = field(default_factory=dict)
    shard_state: Tensors = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RoundUpdate:
    """The end of a round: new weights, new strategy state, and round metrics."""

    weights: torch.Tensor
    state: Tensors
    metrics: dict[str, float] = field(default_factory=dict)


class StrategyDefaults:
    """The Strategy methods most algorithms leave trivial: no state, a single phase.

    Algorithms inherit these and write only what they do differently.
    """

    name: str

    def init_state(self, weights: torch.Tensor) -> Tensors:
        return {}

    def init_shard_state(self, weights: torch.Tensor) -> Tensors:
        return {}

    def broadcast(self, phase: int, weights: torch.Tensor, mean: LocalOutput) -> LocalOutput:
        raise AssertionError(f"{self.name} has a single phase: nothing to broadcast")


class Strategy(Protocol):
    """One distributed optimisation algorithm (DANE, SGD, FedAvg, ...)."""

    name: str
    phases: tuple[str, ...]  # task-name prefixes, e.g. ("local_grad", "local_solve")

    def init_state(self, weights: torch.Tensor) -> Tensors:
        """Driver-side state before round 1 (e.g. a momentum buffer); {} if none."""
        ...

    def init_shard_state(self, weights: torch.Tensor) -> Tensors:
        """Every shard's own state before round 1 (e.g. ADMM's dual); {} if none."""
        ...

    def local(
        self,
        phase: int,
        objective: ShardObjective,
        weights: torch.Tensor,
        received: Tensors,
        previous: LocalOutput | None,
        rng: torch.Generator,
        shard_state: Tensors,
    ) -> LocalOutput:
        """One shard's work in `phase`; `previous` is the same shard's output of phase-1.

        `shard_state` is this shard's state as the round started (see the module docstring).
        """
        ...

    def broadcast(self, phase: int, weights: torch.Tensor, mean: LocalOutput) -> LocalOutput:
        """What every shard receives in phase+1 (tensors) and round metrics (e.g. grad_norm)."""
        ...

    def update(self, weights: torch.Tensor, mean: LocalOutput, state: Tensors) -> RoundUpdate:
        """The new weights from the average of the last phase."""
        ...


def for_round(strategy: Strategy, state: Tensors) -> Strategy:
    """The strategy of the round that starts from driver `state`.

    A strategy may copy a few scalars of its driver state into itself for a round (DANE's
    safeguard: the loss to beat and the current mu), because its shards' phases see the
    strategy but not the driver state. The driver and the reference both call this, so they
    run the same round; strategies without `for_round` are used as they are.
    """
    adapt = getattr(strategy, "for_round", None)
    return adapt(state) if adapt is not None else strategy
