"""The line a run prints once when a round's accuracy falls well below the run's best so far.

A collapse is what a network's local problem does when it is not bounded (`--mu 0` at many
local steps, docs/explanation/algorithms.md): the run exits 0 and, unwatched, nothing says
why the final accuracy is far below an early round's. Rounds fluctuate by a point or two
(a test split of a few hundred rows moves 0.3 points a row), so only a fall of more than
COLLAPSE_POINTS below the best of the rounds before it is named. The metric is the one
that selects the model: the validation accuracy where there is a validation split, else
the test accuracy; regression runs (no accuracy) are not watched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.protocol import Strategy
    from ..setup.config import RunConfig

COLLAPSE_POINTS = 5.0  # accuracy points below the best before it: a collapse, not noise
# The algorithms whose local problem --mu bounds (DANE's family): the setting to change.
PROXIMAL = ("dane", "sdane", "sdane-adaptive", "fedprox", "feddyn")


def advice(config: RunConfig, strategy: Strategy | None = None) -> str:
    """The settings to change, as the run has them: `strategy` is the run's (its unset mu
    and its K from --local-epochs resolved on the store's shards), else the one the settings
    alone give. K given in passes is named by the flag that gives it."""
    run = strategy or config.strategy
    k = getattr(getattr(run, "solver", None), "local_steps", config.local_steps)
    if config.local_epochs is not None:
        steps = f"lower --local-epochs (now {config.local_epochs:g}, K = {k} steps)"
    else:
        steps = f"lower --local-steps (now {k})"
    steps += f" or --local-lr (now {config.local_lr:g})"
    if config.algorithm not in PROXIMAL:
        return steps
    mu = getattr(run, "mu", config.mu)
    return f"raise --mu (now {mu:g}) to bound the local problem, or {steps}"


class CollapseWatch:
    """Fed every round's row; returns the warning the first time a round collapses."""

    def __init__(self, settings: str) -> None:
        self.settings = settings  # advice(config): what to change
        self.best: tuple[float, int] | None = None  # (accuracy, round) so far
        self.warned = False

    def feed(self, row: dict[str, Any]) -> str | None:
        """The warning if `row` is the run's first collapse, else None."""
        validated = row.get("val_accuracy") is not None
        name = "validation" if validated else "test"
        accuracy = row["val_accuracy"] if validated else row.get("test_accuracy")
        if accuracy is None:
            return None
        line = None
        if self.best is not None and not self.warned:
            best, best_round = self.best
            fall = 100.0 * (best - accuracy)
            if fall > COLLAPSE_POINTS:
                self.warned = True
                line = (
                    f"warning: round {row['round']}'s {name} accuracy {accuracy:.4f} is "
                    f"{fall:.1f} points below round {best_round}'s {best:.4f}: the local "
                    f"solves overshoot; {self.settings} (docs/explanation/algorithms.md)"
                )
        if self.best is None or accuracy > self.best[0]:
            self.best = (accuracy, row["round"])
        return line
