"""What the driver and the ranks of a segment (`--collective torch`) tell each other: the
segment's plan, where the run's model selection stands, and each rank's part of a round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..round.group import GroupSpec
from ..round.tasks import RoundResult
from ..round.wire import register_dataclasses
from .decisions import Selection

# A segment ends at the first round boundary past this many seconds, so that two runs
# sharing workers take turns (the driver's leases) and a long run re-plans now and then.
SEGMENT_SECONDS = 60.0


@dataclass(frozen=True, kw_only=True)
class SegmentPlan:
    """What every rank of a segment is told: its group, its rounds, the run's cadences, the
    queue its rows go to, and where the run's model selection stands."""

    group: GroupSpec
    first: int  # the segment's first round
    rounds: int  # the run's last round
    eval_every: int
    checkpoint_every: int
    queue: str
    selection: Selection
    has_states: bool  # whether every rank sends its shards' states each round
    seconds: float = SEGMENT_SECONDS


@dataclass(frozen=True, kw_only=True)
class RoundMessage:
    """One rank's part of a round, as the driver receives it. Rank 0's holds the round's
    figures (its weights where `weights`), its evaluation and whether the segment ends."""

    round: int
    rank: int
    result: RoundResult | None = None  # rank 0: the update, stripped unless `weights`
    finite: bool = True
    evaluation: dict[str, float] | None = None
    weights: bool = False
    ends: bool = False
    shard_states: dict[int, Any] | None = None


# Its tensors (the weights, the shards' states) travel as frames (wire.py), as a round's
# result does on the Dask graph, not pickled in-band through the scheduler.
register_dataclasses(RoundMessage)
