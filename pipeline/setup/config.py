"""RunConfig: every setting of a training run, validated before any work starts.

Settings come in five sections (data, model, algorithm, cluster, run; settings.py), each a
frozen dataclass that checks its own values. RunConfig joins them into one flat, keyword-only
dataclass whose field names are the `dane train` flags with '-' written as '_': a flag, its
TOML key and its field are one name (`flag`). Checks raise SettingError naming the field;
`in_flags` words such an error with the flags instead, as the command line shows it.

Precedence: built-in defaults < a TOML file (--config) < command-line flags. The resolved
configuration is written to the run directory as config.toml, one [table] per section, and
`--resume` reads it back; flat keys, as older files hold them, read the same. A resume may
change only RESUMABLE_KEYS; config.toml then keeps the original settings and records each
resume as a [[resumed]] table, and reading it back gives the settings in effect (both in
resumed.py, which declares what a resume is).
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import presets
from ..algorithms import SETTINGS, Strategy, make_strategy
from ..algorithms.parts.setting_error import SettingError, flag
from .resumed import (  # IDENTITY_KEYS and RESUMABLE_KEYS re-exported: callers read them here
    IDENTITY_KEYS,
    RESUMABLE_KEYS,
    RESUMED,
    Resume,
    RunRecord,
    parse_resumes,
)
from .settings import (
    DEVICES,
    DTYPES,
    AlgorithmSettings,
    ClusterSettings,
    DataSettings,
    ModelSettings,
    RunSettings,
    scheduler_file_address,
)

__all__ = [  # the sections and their helpers are re-exported: callers import them from here
    "DEVICES",
    "DTYPES",
    "IDENTITY_KEYS",
    "RESUMABLE_KEYS",
    "SECTIONS",
    "AlgorithmSettings",
    "ClusterSettings",
    "DataSettings",
    "ModelSettings",
    "RunConfig",
    "RunSettings",
    "check_settings",
    "flag",
    "in_flags",
    "read_record",
    "read_toml",
    "resolve_config",
    "scheduler_file_address",
    "section_of",
    "to_toml",
]

# The sections in the order config.toml lists them; their fields are RunConfig's.
SECTIONS: dict[str, type] = {
    "data": DataSettings,
    "model": ModelSettings,
    "algorithm": AlgorithmSettings,
    "cluster": ClusterSettings,
    "run": RunSettings,
}


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunSettings, ClusterSettings, AlgorithmSettings, ModelSettings, DataSettings):
    """One training run: every section's fields, flat (field names are the CLI flags)."""

    def validate(self) -> RunConfig:
        """Return self, or raise ValueError naming the first bad setting and its fix.

        A RunConfig's fields are the flags, and its errors name them as flags: the SettingError
        of a section or an algorithm (which names the field) is worded so here.
        """
        try:
            self.strategy()  # the algorithm checks its own hyperparameters
            self.check_model()
            self.check_cluster()
            self.check_run()
        except SettingError as err:
            raise SettingError(in_flags(err)) from None
        return self

    @functools.cached_property
    def built_strategy(self) -> Strategy:
        # Built once per config, by validate(): the strategy is a frozen function of the
        # fields, so the set-up (run_setup.py) takes this one rather than building another.
        # cached_property writes the instance's __dict__, which a frozen dataclass allows.
        return make_strategy(self.algorithm, self.as_dict())

    def strategy(self) -> Strategy:
        """The algorithm with its hyperparameters (algorithms/ registry)."""
        return self.built_strategy

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def in_flags(err: BaseException) -> str:
    """An error's message as the command line words it: a SettingError's fields as flags."""
    return err.worded(flag) if isinstance(err, SettingError) else str(err)


def section_of(key: str) -> str:
    """The section a RunConfig field belongs to."""
    return next(
        name for name, cls in SECTIONS.items() if key in {f.name for f in dataclasses.fields(cls)}
    )


# `dane train --help` groups its options in these panels, in this order: a section's own,
# except the algorithm section's settings, which stand under their part's PANEL (the local
# solver, the server step) where the class that declares them names one.
PANELS = ("Data", "Model", "Algorithm", "Local solver", "Server step", "Run and output", "Cluster")
_SECTION_PANELS = {"data": "Data", "model": "Model", "cluster": "Cluster", "run": "Run and output"}


def panel_of(key: str) -> str:
    """The --help panel of a RunConfig field (one of PANELS)."""
    section = section_of(key)
    if section != "algorithm":
        return _SECTION_PANELS[section]
    gathered = SETTINGS.get(key)  # None: the algorithm section's own (--algorithm)
    return getattr(gathered.owner, "PANEL", "Algorithm") if gathered else "Algorithm"


def _field_types() -> dict[str, tuple[type, ...]]:
    """Accepted TOML value types per field (ints are accepted where floats are)."""
    types: dict[str, tuple[type, ...]] = {}
    for f in dataclasses.fields(RunConfig):
        text = str(f.type)
        if f.type is bool or text == "bool":
            types[f.name] = (bool,)
        elif "float" in text:
            types[f.name] = (int, float)
        elif "int" in text:
            types[f.name] = (int,)
        else:
            types[f.name] = (str,)
    return types


def check_settings(settings: dict[str, Any], origin: str) -> dict[str, Any]:
    """Reject unknown keys and wrong types, naming the key; return flat settings, '-' as '_'.

    Keys may stand at the top level or in their section's table ([algorithm] eta = 1).
    """
    types = _field_types()
    checked: dict[str, Any] = {}
    for raw_key, value in _flatten(settings, origin).items():
        key = raw_key.replace("-", "_")
        if key not in types:
            raise ValueError(
                f"{origin}: unknown key {raw_key!r}; known keys: {', '.join(sorted(types))}"
            )
        # A TOML boolean is a Python bool, which is an int too: only a bool field takes one.
        if isinstance(value, bool) != (types[key] == (bool,)) or not isinstance(value, types[key]):
            expected = " or ".join(t.__name__ for t in types[key])
            raise ValueError(
                f"{origin}: key {raw_key!r} must be {expected}, got {type(value).__name__}"
            )
        checked[key] = float(value) if float in types[key] else value
    return checked


def _flatten(settings: dict[str, Any], origin: str) -> dict[str, Any]:
    """Section tables merged into one flat table; a key in the wrong section is an error.

    `model` and `algorithm` name both a section and a setting: a table is the section.
    """
    flat: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in SECTIONS or (not isinstance(value, dict) and name in _field_types()):
            flat[name] = value
            continue
        if not isinstance(value, dict):
            raise ValueError(f"{origin}: {name!r} must be a table ([{name}]) of settings")
        for raw_key, setting in value.items():
            key = raw_key.replace("-", "_")
            if key in _field_types() and section_of(key) != name:
                raise ValueError(
                    f"{origin}: key {raw_key!r} belongs in [{section_of(key)}], not [{name}]"
                )
            flat[raw_key] = setting
    return flat


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
    resumes = parse_resumes(data.pop(RESUMED, []), str(path), check_settings)
    return RunRecord(original=check_settings(data, str(path)), resumes=resumes)


def resolve_config(
    *, file: str | Path | None, flags: dict[str, Any], base: dict[str, Any] | None = None
) -> RunConfig:
    """Defaults < `base` (a resumed run's saved settings) < the TOML file < flags given.

    A flag whose value is None was not given on the command line.
    """
    settings = dict(base or {})
    settings.update(read_toml(file) if file else {})
    settings.update({k: v for k, v in flags.items() if v is not None})
    return RunConfig(**settings).validate()


def to_toml(config: RunConfig | Mapping[str, Any], *, resumed: Sequence[Resume] = ()) -> str:
    """config.toml text, one table per section, then a [[resumed]] table per resume; None
    values (unset settings) are left out. `config`: a RunConfig, or flat settings as read."""
    values = config.as_dict() if isinstance(config, RunConfig) else config
    lines = ["# dask-dane run configuration, as resolved when the run started"]
    for name, section in SECTIONS.items():
        lines.append(f"\n[{name}]")
        for f in dataclasses.fields(section):
            value = values.get(f.name)
            if value is None:
                continue
            lines.append(f"{f.name} = {_toml_value(value)}")
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
            lines.append(f"{key} = {{ {sides} }}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # TOML's spelling, not Python's
    return _toml_string(value) if isinstance(value, str) else repr(value)


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
