"""What decides about a round, written once: whether it is evaluated, whether its weights
come to the driver (a checkpoint), whether it is selected as the model (best.pt), and whether
the run stops after it.

The driver applies these rules to the rounds it records (driver.py, pipelined.py,
run_state.RunState) and a segment's ranks apply the same ones to the rounds they run
(segment.py, `--collective torch`): from the same numbers every rank and the driver reach the
same decisions, so a rank sends the weights the driver will save and ends its segment where
the driver stops.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol


class Cadence(Protocol):
    """The settings that space the rounds' work (the run's config; a segment's plan)."""

    rounds: int
    eval_every: int
    checkpoint_every: int


def evaluated(cadence: Cadence, t: int) -> bool:
    """Whether round `t` is scored: every --eval-every rounds, and the run's last."""
    return t % cadence.eval_every == 0 or t == cadence.rounds


def checkpointed(cadence: Cadence, t: int) -> bool:
    """Whether round `t`'s weights come to the driver to be saved whatever else happens:
    every --checkpoint-every rounds, and the run's last."""
    return t % cadence.checkpoint_every == 0 or t == cadence.rounds


def selection_score(evaluation: dict[str, float]) -> float | None:
    """What selects the model, higher is better: the validation accuracy, or minus the
    validation loss where the task has no accuracy (regression); None without validation rows."""
    if evaluation.get("val_accuracy") is not None:
        return evaluation["val_accuracy"]
    loss = evaluation.get("val_loss")
    return None if loss is None else -loss


def selects(evaluation: dict[str, float] | None, best_score: float) -> bool:
    """Whether a round so evaluated is selected over the best score so far; without
    validation rows, every evaluated round is (the last one wins)."""
    if evaluation is None:
        return False
    score = selection_score(evaluation)
    return score is None or score > best_score


def stops_early(config: Any, row: dict[str, Any], since_best: int) -> bool:
    """The stop rules after a round: --stop-at-accuracy reached by its validation accuracy (by
    its test accuracy only without a validation split, as before the split existed), or
    --patience evaluated rounds in a row (`since_best`) without a better validation metric."""
    validated = row.get("val_loss") is not None
    if config.patience > 0 and validated and since_best >= config.patience:
        return True
    target = config.stop_at_accuracy
    key = "val_accuracy" if validated else "test_accuracy"
    accuracy = row.get(key)
    return target > 0 and accuracy is not None and accuracy >= target


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Where model selection stands (the best score, the evaluated rounds since it) and the
    stop rules: the driver's RunState advances one with each round it records, a segment's
    ranks carry one through the rounds they run."""

    best_score: float
    since_best: int
    patience: int = 0
    stop_at_accuracy: float = 0.0

    def would_select(self, evaluation: dict[str, float] | None) -> bool:
        return selects(evaluation, self.best_score)

    def advance(self, evaluation: dict[str, float] | None) -> Selection:
        """After a round so evaluated (None: not evaluated, which counts nothing)."""
        if not self.would_select(evaluation):
            return replace(self, since_best=self.since_best + (evaluation is not None))
        score = selection_score(evaluation or {})
        best = self.best_score if score is None else score
        return replace(self, best_score=best, since_best=0)

    def stops(self, evaluation: dict[str, float] | None) -> bool:
        """stops_early on a round's scores as its row would hold them."""
        scores = evaluation or {}
        row = {
            "val_loss": scores.get("val_loss"),
            "val_accuracy": scores.get("val_accuracy"),
            "test_accuracy": scores.get("accuracy"),
        }
        return stops_early(self, row, self.since_best)
