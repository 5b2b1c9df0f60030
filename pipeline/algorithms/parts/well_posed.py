"""Unset settings whose default depends on the model: a network's local problem kept bounded.

DANE's local problem h_i(v) = f_i(v) - <g_i - eta g, v> + (mu/2)||v - w||^2 has a minimum
for any mu >= 0 where f_i is strongly convex (the paper's losses). A network's f_i is bounded
below but flat along many directions (an over-parameterised net fits its shard and leaves
most directions untouched), and with mu = 0 the linear term decreases without bound along
them: more local steps only walk further along the tilt. Measured on digits (2 iid shards,
small-cnn, 10 rounds; docs/explanation/algorithms.md): mu = 0 reaches 97.8 % at K = 30 and
collapses at K = 300 (96.4 % after round 1, 55.7 % after round 10) and K = 1000 (10 %).

How far that walk goes depends on how long a solve runs against its shard: within a few
passes f_i is not fitted yet and its gradient outweighs the tilt (Fashion-MNIST, shards of
5,400 training rows: mu = 0 held 88.6 % over 6 rounds at K = 300, 3.6 passes); beyond them
the shard is fitted and the tilt takes over (digits, 647-row shards: mu = 0 fell 8.6 points
in a round at K = 100, 4.9 passes). So the defaults, for an unset setting, go by the run's
model (`convex_model`) and the passes a solve makes (K / `steps_per_pass`; both are run
settings the set-up fills):
- DANE on a network: mu = SHORT_SOLVE_MU (0.01: bounded, and barely felt: digits at K = 30,
  97.5 % after 10 rounds against 97.8 % with mu = 0) up to FIT_PASSES passes; beyond them
  mu = LONG_SOLVE_MU (0.1) and local_theta = DANE_THETA (0.3: InexactDANE's stop, Reddi et
  al. 2016, tested on a moving average of the steps' gradients, stop_rule.py), so that past
  the steps the bounded problem needs, more K changes nothing. On digits neither alone held
  at K = 1000 (mu = 0.1 alone fell 7.8 points in a round). On the Fashion-MNIST shards above
  both cost: mu = 0.1 reached 84.7 % and with the stop (solves cut to 10-15 steps) 78.8 %,
  against mu = 0's 88.6 %; so they go with the long solves only.
- DANE on a convex model (linear, logistic): mu = 0 and no stop, the paper's, bit for bit; any
  explicit `--mu` (`--mu 0` included) and `--local-theta` are kept as given.
- FedDyn needs mu > 0 (its server step divides by it): 0.01 (alpha, the FedDyn paper's) on
  any model; before, an unset mu refused to run. S-DANE still refuses an unset mu (lam): no
  lam measured trains a network (digits, small-cnn, K = 30, 10 rounds: lam 0.1, 1, 10 and 20
  ended at 10.0, 10.0, 23.4 and 18.7 %), so none is offered as its default.
- FedProx's problem f_i + (mu/2)||v - w||^2 is bounded for any mu: unset is 0 (FedAvg's).
docs/explanation/algorithms.md has the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ModelDefault:
    """An unset setting's value on a network and on a convex model."""

    network: float
    convex: float


# DANE on a network: a solve of more than FIT_PASSES passes over its shard takes LONG_SOLVE_MU
# and the stop DANE_THETA; a shorter one SHORT_SOLVE_MU (bounded, and barely felt).
FIT_PASSES = 4.0
LONG_SOLVE_MU = 0.1
SHORT_SOLVE_MU = 0.01
DANE_THETA = 0.3
FEDDYN_ALPHA = ModelDefault(network=0.01, convex=0.01)
FEDPROX_MU = ModelDefault(network=0.0, convex=0.0)


def fill_unset(strategy: Any, defaults: dict[str, ModelDefault]) -> None:
    """Set each of `strategy`'s fields named in `defaults` that is unset (None) to its value
    for the run's model (`strategy.convex_model`); a frozen dataclass, set in __post_init__."""
    convex = bool(getattr(strategy, "convex_model", False))
    for name, default in defaults.items():
        if getattr(strategy, name) is None:
            value = default.convex if convex else default.network
            object.__setattr__(strategy, name, value)


def fill_dane(strategy: Any, passes: float) -> None:
    """DANE's unset mu and local_theta for a solve of `passes` passes over its shard (inf
    where the store is not known yet): the paper's 0 and no stop on a convex model; on a
    network SHORT_SOLVE_MU up to FIT_PASSES passes, beyond them LONG_SOLVE_MU and, where the
    resolved mu is LONG_SOLVE_MU or more, the stop DANE_THETA."""
    convex = getattr(strategy, "convex_model", False)
    if strategy.mu is None:
        mu = LONG_SOLVE_MU if passes > FIT_PASSES else SHORT_SOLVE_MU
        object.__setattr__(strategy, "mu", 0.0 if convex else mu)
    if strategy.local_theta is None:
        long_solve = not convex and strategy.mu >= LONG_SOLVE_MU
        object.__setattr__(strategy, "local_theta", DANE_THETA if long_solve else 0.0)
