"""What the driver and the ranks of a segment (`--collective torch`) tell each other: the
segment's plan, where the run's model selection stands, and each rank's part of a round."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..round.group import GroupSpec
from ..round.tasks import RoundResult
from ..round.wire import register_dataclasses
from .metrics import stops_early
from .run_state import selection_score, selects

# A segment ends at the first round boundary past this many seconds, so that two runs
# sharing workers take turns (the driver's leases) and a long run re-plans now and then.
SEGMENT_SECONDS = 60.0


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Model selection and the stop rules as the driver's RunState stands (_select,
    stops_early): carried through a segment by every rank alike."""

    best_score: float
    since_best: int
    patience: int
    stop_at_accuracy: float

    def would_select(self, evaluation: dict[str, float] | None) -> bool:
        return selects(evaluation, self.best_score)

    def advance(self, evaluation: dict[str, float] | None) -> Selection:
        if not self.would_select(evaluation):
            return replace(self, since_best=self.since_best + (evaluation is not None))
        score = selection_score(evaluation or {})
        best = self.best_score if score is None else score
        return replace(self, best_score=best, since_best=0)

    def stops(self, evaluation: dict[str, float] | None) -> bool:
        scores = evaluation or {}
        row = {
            "val_loss": scores.get("val_loss"),
            "val_accuracy": scores.get("val_accuracy"),
            "test_accuracy": scores.get("accuracy"),
        }
        return stops_early(self, row, self.since_best)


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
