"""Hyperparameters declared once, on the classes that use them, and the settings made of them.

A hyperparameter is a dataclass field with its default, its rule (checks.py) and its help
text in the field's metadata: `eta: float = declare(1.0, positive, help="...")`. That one
line is the setting's only home: the run settings' algorithm section, `dane train`'s flag
and its help, the TOML key and the API keyword are all generated from it (`gather`, and
pipeline/setup/settings.py). Where several classes use one setting (mu, local_lr), a module
holds it as a `Declaration` and each class takes `DECLARATION.field()`; `gather` refuses two
declarations of one name, so a restated default cannot creep back in.

A class may take a *part* (a local solver, the server step) as a field whose metadata is
`part(*types)`: the classes it may build, whose hyperparameters are the algorithm's too (and
the function that builds it from a run's settings, where it is not `build`). Besides its
declared fields a class takes only the run's seed, rounds, shards, whether its model is
convex and a pass's steps (RUN_SETTINGS).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .checks import Rule


@dataclass(frozen=True, kw_only=True, eq=False)
class Declaration:
    """One setting: default, rule and help. `exclusive`: only the classes that take it use
    it, so setting it with any other algorithm is an error (it would be silently ignored)."""

    default: Any
    rule: Rule | None = None
    help: str = ""
    exclusive: bool = False

    def field(self) -> Any:
        """A fresh dataclass field of this declaration (one per class that takes it)."""
        return dataclasses.field(default=self.default, metadata={"declaration": self})


def declare(default: Any, rule: Rule | None = None, *, help: str, exclusive: bool = False) -> Any:
    """A field declared here and nowhere else (a setting one class uses)."""
    return Declaration(default=default, rule=rule, help=help, exclusive=exclusive).field()


def shown_default(value: object) -> str | None:
    """A default as --help shows it (as one would type it); None for a setting left unset."""
    if value is None:
        return None
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "none"


def with_default(text: str, default: object) -> str:
    """A help text with the default appended: 'Learning rate [0.05].'"""
    shown = shown_default(default)
    return text if shown is None else f"{text.removesuffix('.')} [{shown}]."


def part(
    *types: type, builder: Callable[[Mapping[str, Any]], Any] | None = None
) -> Mapping[str, Any]:
    """The metadata of a field the registry fills with a part: `builder(settings)`, or the
    first of `types` built from the settings (`build`), as most parts are; `types`: the
    classes it may build. `server: ServerStep = field(metadata=part(ServerStep), ...)`."""
    made = builder or functools.partial(build, types[0])
    return MappingProxyType({"part": made, "part_types": types})


def declared_fields(cls: type) -> Iterable[tuple[dataclasses.Field, type]]:
    """Every declared field of `cls` and of the parts it takes, with the class that holds it."""
    for f in dataclasses.fields(cls):
        if "declaration" in f.metadata:
            yield f, cls
        for part_type in f.metadata.get("part_types", ()):
            yield from declared_fields(part_type)


def setting_names(cls: type) -> set[str]:
    """The settings `cls` (and its parts) take."""
    return {f.name for f, _ in declared_fields(cls)}


@dataclass(frozen=True, kw_only=True)
class Gathered:
    """A setting as the run settings hold it: name, type, declaration, and the class that
    declared it first (its SECTION, where it has one, is the setting's: [solver], [server])."""

    name: str
    type: Any
    declaration: Declaration
    owner: type


def gather(classes: Iterable[type]) -> dict[str, Gathered]:
    """Every setting the classes declare, in order of first appearance.

    A name declared twice (two Declarations, not one shared) is an error: it would give one
    setting two defaults, two rules or two help texts.
    """
    found: dict[str, Gathered] = {}
    for cls in classes:
        for f, owner in declared_fields(cls):
            declaration = f.metadata["declaration"]
            known = found.get(f.name)
            if known is None:
                value_type = typing.get_type_hints(owner)[f.name]
                found[f.name] = Gathered(
                    name=f.name, type=value_type, declaration=declaration, owner=owner
                )
            elif known.declaration is not declaration:
                raise TypeError(
                    f"{owner.__qualname__}.{f.name} declares the setting {f.name!r} again; "
                    "take the existing Declaration's .field() instead"
                )
    return found


# The run's own values a class may take besides its declared settings, each by its name: the
# seed its samples draw with, the rounds its schedules span, the shards the store holds (the
# set-up adds them, epochs.py), whether its model is convex and the steps a pass over a shard
# takes (the defaults that depend on them, well_posed.py). No other field is filled from the
# settings.
RUN_SETTINGS = ("seed", "rounds", "shards", "convex_model", "steps_per_pass")


def build(cls: type, settings: Mapping[str, Any], **given: Any) -> Any:
    """`cls` with its declared fields and RUN_SETTINGS taken from a run's `settings`, its
    parts built from them, and `given` (what the caller chose) as passed."""
    values = dict(given)
    for f in dataclasses.fields(cls):
        if "part" in f.metadata:
            values[f.name] = f.metadata["part"](settings)
        elif f.name in settings and ("declaration" in f.metadata or f.name in RUN_SETTINGS):
            values.setdefault(f.name, settings[f.name])
    return cls(**values)
