"""The Strategy protocol: what every algorithm provides, as pure functions of data.

A round runs the strategy's phases in order. In phase p every shard computes
`local(LocalContext)`; the outputs are averaged over shards (weighted by shard size); between
phases `broadcast` turns that average into what every shard receives next, once per phase
(and may decide something the update needs: DANE's safeguard); after the last phase
`update(RoundEnd)` gives the new weights and state. Strategies hold hyperparameters only, in
frozen dataclasses whose fields are named like the `dane train` flags, so they pickle and
travel as data and the registry (__init__.py) builds them from a run's settings by name.

State is data, optax-style: passed in and returned, never kept in the strategy.
- Driver state (`init_state`, returned by `update`): a frozen dataclass of the algorithm's
  own (`state_type`), or None. It lives where the round's update runs.
- Round data (`round_data(state)`): the few scalars of the driver state that the shards'
  phases and the broadcast need (DANE's anchor loss and mu), derived once per round and
  handed to every task of the round; no tensors, since it travels to every shard.
- Shard state (ADMM's dual variables): tensors that only one shard uses and that outlive a
  round (`init_shard_state`, `shard_state_type`). Every phase of round t receives the
  shard's state as round t started, and the last phase returns the state for round t+1 in
  `LocalOutput.shard_state`. The pipeline keeps the list of shard states next to the driver
  state (so checkpoints and retries after a lost worker see it, and the reference runner
  keeps the same list), sends each shard its own entry and counts none of it as
  communication: in a deployment it would stay on the shard's machine. We chose this over
  folding it into the driver state keyed by shard because the averaged phases never hand the
  driver any single shard's output, and over state that lives only on workers between rounds
  because a lost worker or a resumed run would then lose the duals.
Checkpoints hold states as plain dicts (`state_to_data`), read back with `state_from_data`.

A model's buffers (BatchNorm's running statistics) are no strategy's business: no `local`,
`broadcast` or `update` sees them, so every update, DANE's, server momentum, line searches,
safeguards and gd/agd's steps alike, acts on the weights alone. The pipeline gives each
shard the round's buffers, keeps what that shard's minibatch steps made of them, and takes
the row-weighted mean of the last phase that stepped (aggregate.py); a round without steps
(DANE after a safeguard rejection) keeps them as they were. Full-batch strategies
(`full_batch`: gd, agd) never step, so they refuse models with running statistics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import torch

# A string inside: torch is imported where tensors are made, not to declare the settings.
Tensors = dict[str, "torch.Tensor"]


class Objective(Protocol):
    """f_i, one shard's objective, as an algorithm's local work reads it (the engine's is
    round/objective.py's ShardObjective: mean loss of the model at flat weights w)."""

    @property
    def num_samples(self) -> int: ...

    def loss(self, w: torch.Tensor) -> float: ...

    def loss_and_grad(self, w: torch.Tensor) -> tuple[float, torch.Tensor]: ...

    def batch_loss(self, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Mean loss over `rows`, differentiable with respect to w."""
        ...

    def sample_rows(self, batch_size: int, rng: torch.Generator) -> torch.Tensor: ...

    def fixed_sample(self, size: int, seed: int) -> Objective:
        """The first `size` rows in one fixed order drawn from `seed` (all if 0)."""
        ...

    def row_range(self, start: int, stop: int) -> Objective: ...

    def hessian_operator(self, w: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]: ...


@dataclass(frozen=True, kw_only=True)
class LocalOutput:
    """What one shard sends back in a phase; `tensors` count as communication, `metrics` not.

    `shard_state` (last phase only) is the shard's own state for the next round: it is neither
    averaged nor counted as communication, nor is `kept`.
    """

    tensors: Tensors
    metrics: dict[str, float] = field(default_factory=dict)
    shard_state: Any = None
    rows: int = 0  # rows of the shard this work read (images processed), summed over shards
    # Tensors this shard keeps for its own next phase (LocalContext.previous): neither
    # averaged nor sent; the next phase runs on the same worker.
    kept: Tensors = field(default_factory=dict)
    # This shard's own figures (local_problem.py): not averaged, reported per shard in the
    # round's metrics row under `shards`; a few floats, not counted as communication.
    diagnostics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LocalContext:
    """Everything one shard's work in one phase sees."""

    phase: int
    round_index: int  # t, counted from 1
    objective: Objective
    weights: torch.Tensor  # w: the weights the round started from
    received: Tensors  # what the previous phase's broadcast sent (phase 0: Strategy.opening)
    previous: LocalOutput | None  # this shard's own output of the previous phase
    rng: torch.Generator  # seeded per (run, round, shard)
    shard_state: Any = None  # this shard's state as the round started
    round_data: Any = None  # Strategy.round_data of the round's driver state


@dataclass(frozen=True, kw_only=True)
class Broadcast:
    """A phase's average turned into what every shard receives next, computed once.

    `tensors` travel to every worker and count as communication; `metrics` are round metrics
    (grad_norm); `decision` is what the strategy decided here for its own update.
    """

    tensors: Tensors
    metrics: dict[str, float] = field(default_factory=dict)
    decision: Any = None


@dataclass(frozen=True, kw_only=True)
class RoundEnd:
    """What `update` sees: the round's start, its last average and its earlier broadcasts."""

    round_index: int  # t, counted from 1
    weights: torch.Tensor  # w: the weights the round started from
    mean: LocalOutput  # the last phase's average over shards
    broadcasts: tuple[Broadcast, ...]  # every earlier phase's broadcast, in phase order
    metrics: dict[str, float]  # the round's averaged metrics so far (train_loss: F(w), ...)
    state: Any = None  # the driver state as the round started
    round_data: Any = None


@dataclass(frozen=True, kw_only=True)
class RoundUpdate:
    """The end of a round: new weights, new driver state, and round metrics."""

    weights: torch.Tensor
    state: Any = None
    metrics: dict[str, float] = field(default_factory=dict)


class Strategy:
    """One distributed optimisation algorithm (DANE, SGD, FedAvg, ...).

    Algorithms inherit this class and write `local`, `update` and `label`, and only what
    else they do differently: here are the trivial defaults, no state and a single phase.
    """

    name: ClassVar[str]
    phases: ClassVar[tuple[str, ...]]  # task-name prefixes, e.g. ("local_grad", "local_solve")
    state_type: ClassVar[type | None] = None  # the driver state's dataclass; None: no state
    shard_state_type: ClassVar[type | None] = None  # each shard's state's dataclass; None: none
    full_batch: ClassVar[bool] = False  # takes no minibatch steps (gd, agd)

    def __post_init__(self) -> None:
        validate(self)  # each field's declared rule (algorithms/parts/checks.py)

    def init_state(self, weights: torch.Tensor) -> Any:
        """Driver state before round 1 (e.g. a momentum buffer); None if none."""
        return None

    def init_shard_state(self, weights: torch.Tensor) -> Any:
        """Every shard's own state before round 1 (e.g. ADMM's dual); None if none."""
        return None

    def round_data(self, state: Any) -> Any:
        """The scalars of `state` that this round's shards and broadcast need; None if none."""
        return None

    def opening(self, state: Any) -> Tensors:
        """Tensors of `state` every shard receives in phase 0 besides the weights (SCAFFOLD's
        control variate); they travel like the weights and count as communication."""
        return {}

    def local(self, ctx: LocalContext) -> LocalOutput:
        """One shard's work in phase ctx.phase."""
        raise NotImplementedError

    def broadcast(self, phase: int, mean: LocalOutput, round_data: Any) -> Broadcast:
        """What every shard receives in phase+1, from the average of `phase`."""
        raise AssertionError(f"{self.name} has a single phase: nothing to broadcast")

    def update(self, end: RoundEnd) -> RoundUpdate:
        """The new weights and state from the average of the last phase."""
        raise NotImplementedError

    def label(self) -> str:
        """The algorithm and the settings that distinguish it, for plots."""
        raise NotImplementedError

    def row_figures(
        self, round_index: int, metrics: dict[str, float], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        """What round `round_index`'s metrics row shows of the algorithm beyond `metrics`
        (its update's own figures, added as named): the rates and steps its schedules gave
        the round, say. `previous`: the row before (None for the first), for averages over
        rounds. The built-in algorithms' are algorithms/parts/row_figures.py's."""
        return {}


def validate(instance: Any) -> None:
    """Apply every declared field's rule to an instance's values: a field declares its rule
    in its metadata (algorithms/parts/hyperparameters.py `declare`), which raises a
    SettingError naming the field and the fix."""
    for f in dataclasses.fields(instance):
        rule = getattr(f.metadata.get("declaration"), "rule", None)
        if rule is not None:
            rule(f.name, getattr(instance, f.name))


def state_to_data(state: Any) -> dict[str, Any] | None:
    """A state dataclass as a plain dict of tensors and numbers (what a checkpoint holds)."""
    if state is None:
        return None
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def state_from_data(state_type: type | None, data: dict[str, Any] | None) -> Any:
    """The state dataclass back from state_to_data's dict (None, or {}, for no state).

    Checkpoints written before states were dataclasses hold the same keys, with numbers as
    0-dim tensors: those become numbers again.
    """
    import torch

    if state_type is None or not data:
        return None
    numbers = {f.name for f in dataclasses.fields(state_type) if str(f.type) in ("float", "int")}
    values = {
        key: (value.item() if key in numbers and isinstance(value, torch.Tensor) else value)
        for key, value in data.items()
    }
    return state_type(**values)
