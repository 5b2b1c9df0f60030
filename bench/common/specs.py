"""What every benchmark's training runs start from: one base RunConfig, changed by replace.

A bench spec that trains through dask-dane holds its runs' settings as a RunConfig, its
`run` field (`run_defaults`: BASE with the bench's own defaults), beside its own fields, each
declared once with its default and help (`option`). Its RUN_FLAGS name the RunConfig fields
its command line takes (options.spec_options makes the options from both).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ... import presets
from ...pipeline.setup.config import RunConfig, check_settings

# A bench's clusters take a free dashboard port: it may run beside a user's own cluster.
BASE = RunConfig(dashboard_address="127.0.0.1:0")
_RUN_FIELDS = {f.name for f in fields(RunConfig)}


def run_defaults(**defaults: Any) -> Callable[[], RunConfig]:
    """The factory of a spec's `run` field: BASE with the bench's defaults (RunConfig names).
    `run: RunConfig = field(default_factory=run_defaults(model="mlp"))`."""
    return lambda: replace(BASE, **defaults)


def default_run(spec_type: type) -> RunConfig:
    """The RunConfig a spec of `spec_type` holds when none is given."""
    return {f.name: f for f in fields(spec_type)}["run"].default_factory()


def run_flags(spec_type: type) -> tuple[str, ...]:
    """The RunConfig fields a spec's command line takes (none for a spec without a run)."""
    return getattr(spec_type, "RUN_FLAGS", ())


def spec_of(spec_type: type, **flags: Any) -> Any:
    """A spec from flags by name: those in its RUN_FLAGS set its run (`run=`: the RunConfig
    they change; else the spec's default one), the rest are its own fields."""
    if "run" not in {f.name for f in fields(spec_type)}:
        return spec_type(**flags)  # a spec of a run that is not dask-dane's (DDP, convex)
    run_names = set(run_flags(spec_type))
    changes = {k: v for k, v in flags.items() if k in run_names}
    own = {k: v for k, v in flags.items() if k not in run_names and k != "run"}
    base = flags.get("run") or default_run(spec_type)
    return spec_type(run=replace(base, **changes), **own)


def spec_record(spec: Any) -> dict[str, Any]:
    """A spec as its results' JSON records it: its RUN_FLAGS, then its own fields, flat (as
    the flags were typed; the readers of earlier results take them by these names)."""
    own = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name != "run"}
    return {**{name: getattr(spec.run, name) for name in run_flags(type(spec))}, **own}


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A bench spec's own field, with the help of its command-line option (`flag`: the
    option's name where it differs from the field's, e.g. "--bandwidth" for bandwidths).
    `aliases`: former names, still read but hidden from --help (one name per concept)."""
    metadata = {"help": help, "flag": flag, "aliases": aliases}
    return dataclasses.field(default=default, metadata=metadata)


def run_config(spec: Any = None, **changes: Any) -> RunConfig:
    """The validated RunConfig of a bench's run: BASE, then the spec's fields named like
    RunConfig's, then `changes` (ValueError naming the flag if the result is bad)."""
    own = {}
    if spec is not None:
        own = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name in _RUN_FIELDS}
    return replace(BASE, **{**own, **changes}).validate()


def require_at_least_one(**flags: int) -> None:
    """ValueError naming the first flag (written with '_') whose value is below 1."""
    for name, value in flags.items():
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")


def run_tables(path: str | Path, flag: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, settings) of every [[run]] table of a TOML file, its [defaults] applied to each;
    ValueError naming the problem and `flag`, the option that gave the path."""
    try:
        data = tomllib.loads(presets.resolve(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist; check the {flag} path") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML ({err}); fix the file") from None
    defaults = check_settings(data.get("defaults", {}), f"{path} [defaults]")
    runs = []
    for i, table in enumerate(data.get("run", [])):
        table = dict(table)
        name = table.pop("name", None)
        if not name:
            raise ValueError(f'{path}: [[run]] number {i + 1} has no name; add name = "..."')
        runs.append((name, {**defaults, **check_settings(table, f"{path} run {name!r}")}))
    if not runs:
        raise ValueError(f"{path} lists no [[run]] tables")
    return runs
