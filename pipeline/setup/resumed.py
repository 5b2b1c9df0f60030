"""A run's provenance across resumes: config.toml's original settings plus its [[resumed]] tables.

config.toml keeps the settings a run started with; each resume that finished rounds before it
adds one table, the round it resumed after and what it changed, old and new:

    [[resumed]]
    after_round = 3
    local_lr = { old = 0.05, new = 0.1 }

A side is left out where the setting was unset (TOML has no null). The settings a resumed run
trains with are the original ones with every table's new values applied in order (`effective`).

Which settings a resume may change at all is declared and checked here too (RESUMABLE_KEYS,
check_same_run): every other one would splice two different runs into one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..algorithms.parts.setting_error import key_of
from .settings import ClusterSettings, RunSettings

RESUMED = "resumed"  # config.toml's array of tables
Change = tuple[Any, Any]  # (old, new); None: unset

# Settings that define what is being trained: a resumed run must not change them.
IDENTITY_KEYS = ("store", "model", "algorithm", "seed", "dtype", "val_fraction")

# Settings an unset value of which the run fills from its algorithm, model and store
# (epochs.with_strategy_resolved); config.toml holds them as filled since 2026-12-07.
RESOLVED_KEYS = frozenset({"mu", "local_theta", "local_clip", "l2"})

# The only settings a resume may change (each change is recorded in config.toml's [[resumed]]).
# Every other one is refused: it is part of the method the run's curve and label stand for
# (the data, the model and its precision, the algorithm and its hyperparameters, the seed), so a
# change would splice two different runs into one.
RESUMABLE_KEYS = frozenset(
    {
        # The run section but its identity (seed, val_fraction): how long to train (continuing
        # a run further is what a resume is most often for); when to evaluate and when to stop
        # (they choose what is measured, not what is trained); when the driver fetches the
        # weights and saves them (the rounds' results are the same whenever they are fetched,
        # tests/engine/run/test_checkpoint_every.py); where copies of the metrics go
        # (observe/tracking.py: nothing trained depends on them); `out`: the directory may have
        # moved, or be spelled another way.
        *(f.name for f in fields(RunSettings) if f.name not in IDENTITY_KEYS),
        # The local step size already changes from round to round by design (--lr-schedule,
        # --lr-warmup), so no round's update assumes another round's rate; each row records
        # the rate it used (metrics.py).
        "local_lr",
        "lr_schedule",
        "lr_warmup",
        "lr_warmup_epochs",
        # The per-shard figures: forward passes on fixed rows, the weights bit for bit the same
        # with and without them (tests/algorithms/test_diagnostics.py).
        "diagnostics_every",
        # The cluster section: where and how the same rounds run. Results equal bit for bit
        # across workers, threads, collectives and clusters (every collective sums in one fixed
        # order, aggregate.py); a device changes the rounding of the same math only. Where the
        # shards are held too: a resume on a cluster with less memory must be able to stream
        # (minibatch draws differ from resident ones, rows/streamed.py ChunkWindow; full passes
        # and exact solves do not). Not transport: bfloat16 changes the sums.
        *(f.name for f in fields(ClusterSettings) if f.name != "transport"),
    }
)


@dataclass(frozen=True)
class Resume:
    """One resume: it continued after round `after_round` with `changes` {setting: (old, new)}."""

    after_round: int
    changes: dict[str, Change] = field(default_factory=dict)


@dataclass(frozen=True)
class RunRecord:
    """A config.toml read back: the original settings (flat) and the resumes, in order."""

    original: dict[str, Any]
    resumes: tuple[Resume, ...] = ()

    @property
    def effective(self) -> dict[str, Any]:
        """The settings the latest rounds ran with: the original, every change applied."""
        settings = dict(self.original)
        for resume in self.resumes:
            for key, (_, new) in resume.changes.items():
                if new is None:
                    settings.pop(key, None)  # unset again: the default, as in a fresh file
                else:
                    settings[key] = new
        return settings


def add_resume(resumes: tuple[Resume, ...], new: Resume) -> tuple[Resume, ...]:
    """The record after `new`. A resume after the same round as the last one (that one ran no
    round) is folded into it, so the record names only settings that some round ran with."""
    if not resumes or resumes[-1].after_round != new.after_round:
        return (*resumes, new)
    changes = dict(resumes[-1].changes)
    for key, (old, value) in new.changes.items():
        first = changes.pop(key, (old, None))[0]
        if first != value:
            changes[key] = (first, value)
    return (*resumes[:-1], Resume(after_round=new.after_round, changes=changes))


def check_same_run(saved: dict[str, Any], config: Any) -> dict[str, Change]:
    """What `config` (a RunConfig: config.py imports this module, so not by name here)
    changes of a run's `saved` settings, {setting: (old, new)}: only
    RESUMABLE_KEYS may change; ValueError naming the first other one (IDENTITY_KEYS first).

    A setting missing from `saved` was unset, or did not exist when the file was written: it
    counts as its default, so an older config.toml resumes; one of RESOLVED_KEYS missing was
    resolved at the start as it is now (a file before 2026-12-07 left them out).
    """
    defaults = {f.name: f.default for f in fields(config)}
    keys = [*IDENTITY_KEYS, *(key for key in defaults if key not in IDENTITY_KEYS)]
    changes: dict[str, Change] = {}
    for key in keys:
        old, new = saved.get(key, defaults[key]), getattr(config, key)
        if old == new or (old is None and key in RESOLVED_KEYS):  # resolved as it was
            continue
        if key not in RESUMABLE_KEYS:
            name = key_of(key)  # as config.toml and the flags spell it
            made = f"{name} = {old!r}" if old is not None else f"no {name}"
            raise ValueError(
                f"--resume: this run directory was made with {made}, not {new!r}; resume with "
                f"the same {name} or choose another --out"
            )
        changes[key] = (old, new)
    return changes
