"""How many local steps K_t round t takes (--local-steps-schedule), from the base K.

- constant: K_t = K in every round.
- qsr: the Quadratic Synchronization Rule (Gu, Lyu, Arora, Zhang & Huang, ICLR 2024): the
  local steps grow as the learning rate decays, K_t = max(K, floor((alpha / lr_t)^2)). With
  alpha = sqrt(K) --local-lr, the rate's peak takes K: K_t = floor(K / f_t^2) for the
  --lr-schedule factor f_t in (0, 1], at least K and at most --local-steps-max (the cosine
  factor nears 0 in the last rounds). A warm-up (--lr-warmup) does not count as decay, and
  with --lr-schedule constant QSR is constant.
- post-local: post-local SGD (Lin, Stich, Patel & Jaggi, ICLR 2020): one step a round, that is
  synchronous minibatch SGD, for the first --sync-rounds rounds, then K. The paper counts the
  switch in epochs: on m equal shards of n rows, E epochs are E n / B rounds of one step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

LOCAL_STEPS_SCHEDULES = ("constant", "qsr", "post-local")
QSR_DEFAULT_CAP = 16  # --local-steps-max 0: at most 16 K local steps a round under qsr


def steps_per_epoch(rows: int, shards: int, batch_size: int, val_fraction: float = 0.0) -> float:
    """Minibatch steps in one pass over a shard: the shards' mean rows (`rows` training rows
    over `shards`, less the validation split's share `val_fraction`, which does not train)
    over the batch."""
    training_rows = round(rows * (1.0 - val_fraction))
    return training_rows / shards / batch_size


def steps_for_epochs(
    epochs: float, rows: int, shards: int, batch_size: int, val_fraction: float = 0.0
) -> int:
    """K that makes a local solve pass over a shard `epochs` times (--local-epochs), rounded,
    at least 1."""
    return max(1, round(epochs * steps_per_epoch(rows, shards, batch_size, val_fraction)))


def local_steps_at(
    schedule: str,
    base: int,
    round_index: int,
    *,
    factor: float = 1.0,
    sync_rounds: int = 0,
    cap: int = 0,
) -> int:
    """K_t of round `round_index` (from 1) under `schedule`, from the base K = `base`;
    `factor`: the --lr-schedule factor of that round (qsr)."""
    if schedule == "constant":
        return base
    if schedule == "post-local":
        return 1 if round_index <= sync_rounds else base
    assert schedule == "qsr", schedule
    most = cap or QSR_DEFAULT_CAP * base
    if factor <= 0:
        return most  # the rate has decayed to nothing: as long a solve as is allowed
    # The 1e-9 keeps a product that is a whole number in exact arithmetic from flooring to
    # one below it (K / 0.5^2 = 4 K).
    return min(most, max(base, math.floor(base / factor**2 + 1e-9)))


def rounds_for_epochs(epochs: float, steps_per_epoch: float, steps_at: Callable[[int], int]) -> int:
    """The fewest rounds whose local steps (`steps_at(t)`: K_t of round t) make `epochs` passes
    over a shard of `steps_per_epoch` steps: a warm-up or a delay given in epochs, in rounds
    (one at least). Counted round by round, so a post-local phase of one step a round counts
    as what it reads."""
    wanted = epochs * steps_per_epoch - 1e-9  # K_t sums that equal the target exactly count
    taken, rounds = 0, 0
    while taken < wanted:
        rounds += 1
        taken += steps_at(rounds)
    return max(rounds, 1)
