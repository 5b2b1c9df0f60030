"""Settings given in passes over a shard (epochs), resolved on the store into rounds and steps.

A recipe for m workers is written in epochs (Lin et al. 2020: a warm-up of 5 epochs, K = 1 for
the first epochs), so that one config means the same on any m: these settings become the
round and step counts the algorithms read once the store says how many rows a shard trains
on. Each resolves from its own epochs setting every time a run is set up (a resume too), so
a saved config.toml that holds both the epochs and the rounds they gave resolves the same.
- local_epochs: K, the local steps a round (local_steps);
- sync_epochs: post-local SGD's phase of one step a round (sync_rounds);
- lr_warmup_epochs: the local rate's linear warm-up (lr_warmup);
- server_momentum_delay_epochs: the rounds before the server's momentum starts
  (server_momentum_delay).
The last two count the rounds whose K_t add up to the epochs (local_steps_schedule.py), so a
post-local phase counts as the rows it reads.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..algorithms import make_strategy
from ..algorithms.parts.local_steps_schedule import (
    local_steps_at,
    rounds_for_epochs,
    steps_for_epochs,
    steps_per_epoch,
)
from ..algorithms.parts.schedule import lr_factor

if TYPE_CHECKING:
    from ...datasets.store import StoreInfo
    from ..engine.protocol import Strategy
    from .config import RunConfig

# epochs setting -> the rounds setting it sets (counted along the run's K_t)
ROUNDS_FROM_EPOCHS = {
    "lr_warmup_epochs": "lr_warmup",
    "server_momentum_delay_epochs": "server_momentum_delay",
}
# epochs setting -> the steps setting it sets: K and the post-local phase.
STEPS_FROM_EPOCHS = {"local_epochs": "local_steps", "sync_epochs": "sync_rounds"}
# Every epochs setting -> the count it sets.
COUNT_OF_EPOCHS = {**STEPS_FROM_EPOCHS, **ROUNDS_FROM_EPOCHS}


def with_epochs_resolved(config: RunConfig, store: StoreInfo) -> RunConfig:
    """`config` with every epochs setting resolved on `store` (unchanged where none is set)."""
    shape = (store.num_train, store.num_shards, config.batch_size, config.val_fraction)
    given = {count: getattr(config, epochs) for epochs, count in STEPS_FROM_EPOCHS.items()}
    resolved = {k: steps_for_epochs(e, *shape) for k, e in given.items() if e is not None}
    steps = {**dataclasses.asdict(config), **resolved}

    def steps_at(round_index: int) -> int:
        factor = lr_factor(steps["lr_schedule"], round_index, steps["rounds"])
        return local_steps_at(
            steps["local_steps_schedule"],
            steps["local_steps"],
            round_index,
            factor=factor,
            sync_rounds=steps["sync_rounds"],
            cap=steps["local_steps_max"],
        )

    for epochs_key, rounds_key in ROUNDS_FROM_EPOCHS.items():
        epochs = getattr(config, epochs_key)
        if epochs is not None:
            resolved[rounds_key] = rounds_for_epochs(epochs, steps_per_epoch(*shape), steps_at)
    changed = {key: value for key, value in resolved.items() if getattr(config, key) != value}
    # Checked again, but not built again: strategy_on_store builds the run's strategy next.
    return dataclasses.replace(config, **changed).validate(strategy=False) if changed else config


def strategy_on_store(config: RunConfig, store: StoreInfo) -> Strategy:
    """The run's strategy, told the store's m shards (--local-lr-scaling reads them) and the
    steps a pass over a shard takes (DANE's unset mu reads them: well_posed.py)."""
    shape = (store.num_train, store.num_shards, config.batch_size, config.val_fraction)
    settings = {
        **config.strategy_settings(),
        "shards": store.num_shards,
        "steps_per_pass": steps_per_epoch(*shape),
    }
    return make_strategy(config.algorithm, settings)


def with_strategy_resolved(config: RunConfig, strategy: Strategy, l2: float | None) -> RunConfig:
    """`config` with each unset setting the strategy or the model filled written in as filled:
    DANE's (and FedProx's, FedDyn's) mu, DANE's local_theta (well_posed.py), the local steps'
    clip norm (local_solver.py) and the model's l2 (the store's). config.toml then holds what
    the run ran with, and a run from it builds an equal strategy (the fills are idempotent:
    tests/setup/test_strategy_once.py), so the run keeps `strategy`, built once; an old run
    folder without them resolves them the same way (resumed.RESOLVED_KEYS)."""
    filled = {key: getattr(strategy, key, None) for key in ("mu", "local_theta")}
    solver = getattr(strategy, "solver", None)
    filled["local_clip"] = getattr(solver, "clip_norm", None)
    filled["l2"] = l2
    changed = {k: v for k, v in filled.items() if v is not None and getattr(config, k) is None}
    return dataclasses.replace(config, **changed).validate(strategy=False) if changed else config
