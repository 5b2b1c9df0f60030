"""What every benchmark's training runs start from: one base RunConfig, changed by replace.

A bench spec's fields that are named like RunConfig's (store, model, local_steps, ...) mean
what the `dane train` flag of that name means, so they flow into the runs' configuration by
name; each bench then states only what differs for its runs.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ... import presets
from ...pipeline import RunConfig, check_settings

# A bench's clusters take a free dashboard port: it may run beside a user's own cluster.
BASE = RunConfig(dashboard_address="127.0.0.1:0")
_RUN_FIELDS = {f.name for f in fields(RunConfig)}


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
