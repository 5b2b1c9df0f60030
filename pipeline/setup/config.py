"""RunConfig: every setting of a training run, validated before any work starts.

Settings come in seven sections (data, model, algorithm, solver, server, cluster, run;
settings.py), each a frozen dataclass that checks its own values. RunConfig joins them into
one flat, keyword-only dataclass; `section(NAME)` gives one section's values as its own small
dataclass. A setting's TOML key and API keyword are its `dane train` flag without the dashes
(--local-momentum: local_momentum, `key_of`); its field is that name too, save the local
solver's few whose flags took the --local- prefix (FLAG_NAMES: the field is `momentum`). Keys
become fields where settings are read (check_settings) and fields keys where config.toml is
written (to_toml), so no surface shows a field's own name. Checks raise SettingError naming
the field; `in_flags` words such an error with the flags instead, as the command line does.

A TOML file may hold each key at the top level or in its section's table ([solver]
local_lr = 0.1); a key in another section's table, or given twice, is an error naming both
places. [algorithm] also takes the solver's and the server's keys: they are the algorithm's
parts, and config.toml files written before those sections existed hold them there. A key's
former name (the field's, `momentum`) reads as the key, with a note: older files hold it.

Precedence: built-in defaults < a TOML file (--config) < command-line flags. The resolved
configuration is written to the run directory as config.toml, one [table] per section, and
`--resume` reads it back; flat keys, as older files hold them, read the same. A resume may
change only RESUMABLE_KEYS; config.toml then keeps the original settings and records each
resume as a [[resumed]] table, and reading it back gives the settings in effect (both in
resumed.py, which declares what a resume is).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
import tomllib
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import presets
from ..algorithms import make_strategy
from ..algorithms.parts.setting_error import FIELD_OF_KEY, SettingError, flag, key_of
from ..engine.protocol import Strategy, validate
from .resumed import RESUMED, Change, Resume, RunRecord
from .settings import GENERATED, SECTIONS, read_broadcast


# The bases in reverse: a dataclass takes its bases' fields from the last one up, so RunConfig's
# fields come in SECTIONS' order (and config.toml's).
@dataclass(frozen=True, kw_only=True)
class RunConfig(*reversed(SECTIONS.values())):
    """One training run: every section's fields, flat (field names are the CLI flags)."""

    def validate(self, *, strategy: bool = True) -> RunConfig:
        """Return self, or raise ValueError naming the first bad setting and its fix.

        A RunConfig's fields are the flags, and its errors name them as flags: the SettingError
        of a section or an algorithm (which names the field) is worded so here (`in_flags`; the
        API words it with the fields again, keywords.py). `strategy=False` leaves the
        algorithm's own checks to the strategy the caller builds next (epochs.py).
        """
        try:
            if strategy:  # built here, once: the algorithm checks its own hyperparameters
                _ = self.strategy
            validate(self)  # every field's declared rule (the algorithm's again: they pass)
            self.check_model()  # then the checks across fields
            self.check_cluster()
        except SettingError as err:
            err.in_flags = True
            raise
        return self

    @functools.cached_property
    def strategy(self) -> Strategy:
        """The algorithm with its hyperparameters (algorithms/ registry)."""
        # Built once per config, by validate(): the strategy is a frozen function of the
        # fields, so the set-up (run_setup.py) takes this one rather than building another.
        # cached_property writes the instance's __dict__, which a frozen dataclass allows.
        return make_strategy(self.algorithm, self.strategy_settings())

    def strategy_settings(self) -> dict[str, Any]:
        """The settings an algorithm is built from: the fields, and whether the model is
        convex (the unset mu and local_theta take the paper's values there, well_posed.py)."""
        from ...models.registry import is_convex  # imports torch: not for every settings read

        return {**self.as_dict(), "convex_model": is_convex(self.model)}

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def section(self, name: str) -> Any:
        """One section's values as its own dataclass (`config.section("solver").local_lr`)."""
        cls = SECTIONS[name]
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})


def in_flags(err: BaseException) -> str:
    """An error's message as the command line words it: a SettingError's fields as flags."""
    return err.worded(flag) if isinstance(err, SettingError) else str(err)


# `dane train --help` and `dane options` group the options in these panels, in this order.
_SECTION_PANELS = {"data": "Data", "model": "Model", **GENERATED}
_SECTION_PANELS |= {"run": "Run and output", "cluster": "Cluster"}
PANELS = tuple(_SECTION_PANELS.values())


def panel_of(key: str) -> str:
    """The --help panel of a RunConfig field (one of PANELS)."""
    return _SECTION_PANELS[_HOME[key]]


def _value_type(hint: Any) -> type:
    """The type of a field's values, unset left out (`str | None` -> str)."""
    return next(t for t in typing.get_args(hint) or (hint,) if t is not type(None))


# Each field's value type: its flag's type (cli/options.py), its API keyword's, its TOML key's.
_HINTS = typing.get_type_hints(RunConfig)
VALUE_TYPES = {f.name: _value_type(_HINTS[f.name]) for f in dataclasses.fields(RunConfig)}
_HOME = {f.name: name for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)}
# The TOML keys (and the API's keywords): the flags without the dashes, setting_error.key_of.
KEYS = frozenset(key_of(name) for name in VALUE_TYPES)
_NOTED: set[tuple[str, str]] = set()  # (origin, note) check_settings has printed


def check_settings(settings: dict[str, Any], origin: str, *, noun: str = "key") -> dict[str, Any]:
    """Reject unknown keys, wrong types, keys in another section's table and keys given twice
    (flat and in a table, as a-b and a_b, or by a key's former name too), naming the key;
    return flat settings by RunConfig's field names.

    Keys are the flags without the dashes (local_momentum, `key_of`); a key's former name
    (momentum, the field's own) still reads, with a note on stderr. Keys may stand at the top
    level or in their section's table ([algorithm] eta = 1). `noun` names a key in messages
    (the API's are keywords).
    """
    checked: dict[str, Any] = {}
    given: dict[str, tuple[str, str]] = {}  # each field's key and place, for a second one's error
    former: list[tuple[str, str]] = []
    for raw_key, value, table in _entries(settings, origin):
        key, place = raw_key.replace("-", "_"), f"in [{table}]" if table else "at the top level"
        name = field_of(raw_key, origin, noun=noun)
        if key != key_of(name):
            former.append((raw_key, key_of(name)))
        # [algorithm] takes its parts' keys too: config.toml files older than [solver], [server]
        home = _HOME[name]
        if table and table != home and not (table == "algorithm" and home in GENERATED):
            raise ValueError(f"{origin}: {noun} {raw_key!r} belongs in [{home}], not [{table}]")
        if name in given:
            _refuse_twice(origin, noun, name, given[name], (raw_key, place))
        types = (int, float) if VALUE_TYPES[name] is float else (VALUE_TYPES[name],)  # 1 for 1.0
        # A TOML boolean is a Python bool, which is an int too: only a bool field takes one.
        if isinstance(value, bool) != (types == (bool,)) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise ValueError(
                f"{origin}: {noun} {raw_key!r} must be {expected}, got {type(value).__name__}"
            )
        given[name], checked[name] = (raw_key, place), float(value) if float in types else value
    for old, new in former:  # after the checks: a refused file gets its error alone
        _note_once(origin, f"{noun} {old!r} is now {new!r}; it was read as that")
    if (as_given := checked.get("broadcast")) is not None:  # reduce: read as auto, noted
        checked["broadcast"], note = read_broadcast(as_given)
        if note is not None:
            _note_once(origin, f"broadcast {as_given!r} {note}")
    return checked


def _note_once(origin: str, line: str) -> None:
    if (origin, line) not in _NOTED:  # once: a resume reads config.toml more than once
        _NOTED.add((origin, line))
        print(f"{origin}: {line}", file=sys.stderr)


def field_of(raw_key: str, origin: str, *, noun: str = "key") -> str:
    """The RunConfig field a key names (local_momentum, or its former name momentum, ->
    momentum); ValueError for an unknown key, naming the closest key."""
    key = raw_key.replace("-", "_")
    if key in FIELD_OF_KEY:
        return FIELD_OF_KEY[key]
    if key in VALUE_TYPES:
        return key
    close = difflib.get_close_matches(key, sorted({*KEYS, *SECTIONS}), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(
        f"{origin}: unknown {noun} {raw_key!r}; {hint}every {noun} is a `dane train` flag "
        "without the dashes (local_lr for --local-lr): `dane options` lists them all, as does "
        "docs/reference/settings.md"
    )


def _refuse_twice(
    origin: str, noun: str, name: str, first: tuple[str, str], second: tuple[str, str]
) -> None:
    """ValueError for a setting given twice: by one key in two places, or by a key and its
    former name (each (key as written, place))."""
    (first_key, first_place), (key, place) = first, second
    if first_key.replace("-", "_") != key.replace("-", "_"):  # local_momentum and momentum
        raise ValueError(
            f"{origin}: {noun}s {first_key!r} and {key!r} both set {key_of(name)}; "
            f"keep {key_of(name)!r}"
        )
    twice = place if first_place == place else f"{first_place} and {place}"
    raise ValueError(f"{origin}: {noun} {key!r} is given twice, {twice}; keep one")


def _entries(settings: dict[str, Any], origin: str) -> Iterator[tuple[str, Any, str | None]]:
    """(key, value, its section's table or None) for every setting, flat or in a table.

    `model` and `algorithm` name both a section and a setting: a table is the section.
    """
    for name, value in settings.items():
        if name not in SECTIONS or (not isinstance(value, dict) and name in VALUE_TYPES):
            yield name, value, None
        elif not isinstance(value, dict):
            raise ValueError(f"{origin}: {name!r} must be a table ([{name}]) of settings")
        else:
            yield from ((key, setting, name) for key, setting in value.items())


def read_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys, section tables, or a [train] table);
    `preset:NAME` names a shipped preset. A resumed run's config.toml reads as the settings
    its latest rounds ran with (its [[resumed]] changes applied)."""
    return read_record(path).effective


def read_record(path: str | Path) -> RunRecord:
    """A TOML file's settings as written, and its [[resumed]] tables (resumed.py)."""
    path = presets.resolve(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist; check the --config path") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config file {path} is not valid TOML ({err}); fix the file") from None
    if isinstance(data.get("train"), dict):
        data = data["train"]
    resumes = _parse_resumes(data.pop(RESUMED, []), str(path))
    return RunRecord(original=check_settings(data, str(path)), resumes=resumes)


def _parse_resumes(entries: Any, origin: str) -> tuple[Resume, ...]:
    """config.toml's [[resumed]] tables (resumed.py); each value is checked as a setting of
    that name, so a hand-edited table fails as a wrong setting would."""
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
                check_settings({key: sides[side]}, where).popitem()[1] if side in sides else None
                for side in ("old", "new")
            )
            changes[field_of(key, where)] = (old, new)
        resumes.append(Resume(after_round=after, changes=changes))
    return tuple(resumes)


def to_toml(config: RunConfig | Mapping[str, Any], *, resumed: Sequence[Resume] = ()) -> str:
    """config.toml text, one table per section, then a [[resumed]] table per resume, each
    setting by its key (the flag's name, `key_of`); None values (unset settings) are left
    out. `config`: a RunConfig, or flat settings by field name, as read."""
    values = config.as_dict() if isinstance(config, RunConfig) else config
    lines = ["# dask-dane run configuration, as resolved when the run started"]
    for name, section in SECTIONS.items():
        lines.append(f"\n[{name}]")
        lines += [
            f"{key_of(f.name)} = {_toml_value(values[f.name])}"
            for f in dataclasses.fields(section)
            if values.get(f.name) is not None
        ]
    if resumed:
        lines.append("\n# Each resume: the round it continued after, and what it changed")
    for resume in resumed:
        lines += [f"\n[[{RESUMED}]]", f"after_round = {resume.after_round}"]
        for key, (old, new) in resume.changes.items():
            sides = ", ".join(
                f"{side} = {_toml_value(value)}"
                for side, value in (("old", old), ("new", new))
                if value is not None  # unset: TOML has no null, so the side is left out
            )
            lines.append(f"{key_of(key)} = {{ {sides} }}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # TOML's spelling, not Python's
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return repr(value)
