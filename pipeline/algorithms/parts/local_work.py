"""Local work chosen by the run (--overhead-share): K from what a round costs besides its steps.

A round costs K c (its local steps, c a step on the busiest worker) plus F (its fixed cost: the
scheduling of its dependent hops, or the torch group's, and the compute of the phases that take
no local steps, as DANE's gradient pass) plus T (its collective moving the model's bytes). The
share of a round that is not local work is (F + T) / (F + T + K c); it is at most S where

    K >= (F + T) (1 - S) / (S c),

so K is the smallest such whole number, at least 1 and at most a ceiling (CEILING_EPOCHS passes
over a shard: past it a round's local problem drifts from the global one, whatever the
machine). Faster compute (a smaller c) or a dearer round (a larger F + T) take a larger K, and
fewer rounds of it. AdaptDL chooses the batch size from such measurements; this chooses K.
The measuring is the engine's (pipeline/engine/run/round_costs.py), the resolving setup's
(pipeline/setup/measured_steps.py); here the setting and the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .checks import make_rule, optional
from .hyperparameters import declare

# At most this many passes over a shard a round: the ceiling, 4 local epochs.
CEILING_EPOCHS = 4.0

_share = make_rule(
    lambda v: not (math.isfinite(v) and 0 < v < 1),
    "must be in (0, 1), the share of a round left to communication and fixed cost (got "
    "{value}); e.g. 0.1",
)


@dataclass(frozen=True, kw_only=True)
class LocalWork:
    """The setting that chooses K from measured costs (its section: the local solver's)."""

    SECTION: ClassVar[str] = "solver"  # its settings' section ([solver], and its --help panel)

    # None: K is --local-steps (or --local-epochs). A run that sets it measures as it starts
    # and writes the K it chose to config.toml as local_steps, without this setting, so a
    # rerun from that file or a resume trains the same K without measuring again.
    overhead_share: float | None = declare(
        None,
        optional(_share),
        exclusive=True,
        help="Choose K (--local-steps) as the run starts, from a local step's measured time, "
        "the round's fixed cost and its collective's, so that these take at most this share "
        "of a round (e.g. 0.1); written to config.toml as local_steps. Off: K as given.",
    )


@dataclass(frozen=True, kw_only=True)
class RoundCosts:
    """What a round costs, in seconds, as measured at the start of a run."""

    step_s: float  # c: one local step on every shard of the busiest worker
    hops_s: float  # the round's dependent hops through the scheduler (or its group's calls)
    phases_s: float  # the phases besides the local steps (DANE's gradient pass), per round
    comm_s: float  # T: the collective moving the model's bytes, every phase of a round

    @property
    def fixed_s(self) -> float:
        """F: what a round costs whatever its K, besides moving the bytes."""
        return self.hops_s + self.phases_s


def steps_for_share(costs: RoundCosts, share: float, ceiling: int) -> int:
    """The smallest K in [1, ceiling] whose round leaves at most `share` of its time to the
    fixed cost and the collective (the module docstring)."""
    ceiling = max(1, ceiling)
    overhead = costs.fixed_s + costs.comm_s
    if costs.step_s <= 0:  # a step too fast to time: as long a solve as allowed
        return ceiling
    wanted = overhead * (1 - share) / (share * costs.step_s)
    # The 1e-9 keeps a quotient that is whole in exact arithmetic from rounding up past it.
    return min(ceiling, max(1, math.ceil(wanted - 1e-9)))
