"""The run section of a run's settings: where it writes, how long it trains, when it
evaluates, checkpoints and stops, and what it tracks (settings.py joins it to the others)."""

from __future__ import annotations

from dataclasses import dataclass

from ..algorithms.parts.checks import at_least_one, make_rule
from ..algorithms.parts.hyperparameters import declare
from ..algorithms.parts.setting_error import setting


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    # None: plan_run picks a fresh folder (plan.fresh_run_dir), so that a second experiment
    # needs no new flag; the CLI and the API follow the same rule.
    out: str | None = declare(
        None,
        help="Run directory; by default a fresh runs/ALGORITHM-N (the next free N), printed as "
        "the run starts.",
    )
    rounds: int = declare(20, at_least_one, help="Rounds (DANE iterations).")
    seed: int = declare(0, help="Seed of init and sampling.")
    eval_every: int = declare(1, at_least_one, help="Evaluate every N rounds.")
    # 1: the driver fetches every round's weights, as before the setting. Larger values take
    # the weights off the driver's path; a killed driver then re-runs up to N - 1 rounds.
    checkpoint_every: int = declare(
        1,
        at_least_one,
        help="Fetch the weights to the driver and write latest.pt every N rounds (and at the "
        "end, and for a round that becomes best.pt); a killed driver re-runs at most N - 1 "
        "rounds.",
    )
    stop_at_accuracy: float = declare(
        0.0,
        make_rule(
            lambda v: not 0.0 <= v <= 1.0,
            f"is an accuracy in [0, 1] (got {{value}}); 0 trains all {setting('rounds')}",
        ),
        help="Stop once the validation accuracy (the test accuracy with --val-fraction 0) "
        "reaches this; 0: never.",
    )
    # Tracking (run/tracking.py): copies of metrics.jsonl elsewhere, so resumable settings.
    tensorboard: str = declare(
        "auto",
        help="TensorBoard scalars: auto (OUT/tb/ when tensorboard is installed) | DIR | none.",
    )
    mlflow: str | None = declare(
        None,
        help="MLflow tracking URI (sqlite:///runs/mlflow.db, http://HOST:5000): the settings as "
        "params, each round's metrics, the model as an artifact; needs dask-dane[track].",
    )
    patience: int = declare(
        0,
        make_rule(
            lambda v: v < 0, "counts evaluated rounds (got {value}); use 0 to train all rounds"
        ),
        help="Stop after N evaluated rounds without a better validation metric; 0: never.",
    )
    # Chosen at train time from each shard's rows (round/shards.py part_positions), so any
    # store has one.
    # 0.1 (issue 35 item 1): best.pt, --stop-at-accuracy and --patience then judge rounds on
    # rows the model never trained on, not on the test split they report. A run dir whose
    # config.toml predates the key trained on every row and resumes with 0 (run/rundir.py).
    val_fraction: float = declare(
        0.1,
        make_rule(
            lambda v: not 0.0 <= v < 1.0,
            "is a share of each shard's rows in [0, 1) (got {value}); use e.g. 0.1, or 0 for no "
            "validation split",
        ),
        help="Share of each shard's training rows held out (stratified by class, seeded) as "
        "the validation split that selects best.pt; 0: none, every row trains, best.pt is the "
        "last evaluated round, --stop-at-accuracy reads the test accuracy and --patience "
        "never stops.",
    )
