"""A run's provenance across resumes: config.toml's original settings plus its [[resumed]] tables.

config.toml keeps the settings a run started with; each resume that finished rounds before it
adds one table, the round it resumed after and what it changed, old and new:

    [[resumed]]
    after_round = 3
    local_lr = { old = 0.05, new = 0.1 }

A side is left out where the setting was unset (TOML has no null). The settings a resumed run
trains with are the original ones with every table's new values applied in order (`effective`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RESUMED = "resumed"  # config.toml's array of tables
Change = tuple[Any, Any]  # (old, new); None: unset


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


def parse_resumes(
    entries: Any, origin: str, check: Callable[[dict[str, Any], str], dict[str, Any]]
) -> tuple[Resume, ...]:
    """config.toml's [[resumed]] tables; `check` (config.check_settings) checks each value as
    a setting of that name, so a hand-edited table fails as a wrong setting would."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{origin}: 'resumed' must be [[resumed]] tables; fix the file")
    resumes = []
    for number, entry in enumerate(entries, start=1):
        where = f"{origin}: [[resumed]] table {number}"
        entry = dict(entry)
        after = entry.pop("after_round", None)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"{where} needs after_round, a round number >= 0; fix the file")
        changes: dict[str, Change] = {}
        for key, sides in entry.items():
            if not isinstance(sides, dict) or not sides or set(sides) - {"old", "new"}:
                raise ValueError(f"{where}: {key} must be {{ old = ..., new = ... }}; fix the file")
            old, new = (
                check({key: sides[side]}, where).popitem()[1] if side in sides else None
                for side in ("old", "new")
            )
            changes[key.replace("-", "_")] = (old, new)
        resumes.append(Resume(after_round=after, changes=changes))
    return tuple(resumes)


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
