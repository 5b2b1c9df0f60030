"""What every benchmark's training runs start from: one base RunConfig, changed by replace.

A bench spec's fields that are named like RunConfig's (store, model, local_steps, ...) mean
what the `dane train` flag of that name means, so they flow into the runs' configuration by
name; each bench then states only what differs for its runs.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from ..pipeline.config import RunConfig

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
