"""One run's plan: (a config file, flags or keywords, resume) turned into its RunConfig once.

The command line (`dane train`) and the Python API (`dask_dane.train`) both call `plan_run`,
so a run described either way resolves the same, in one pass:
    built-in defaults < the saved config.toml (resume) < the TOML file < flags or keywords,
checked once (RunConfig.validate); then the embedded default store is written if no store
is named (after the checks, so that bad input writes nothing), and a resume is held to the
same run (check_same_run: only config.RESUMABLE_KEYS may change; start_run records them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..setup.config import RunConfig, read_toml, resolve_config
from ..setup.run_setup import ensure_default_store
from .rundir import RunDir, check_same_run
from .tracking import check_tracking


def plan_run(
    settings: dict[str, Any], *, file: str | Path | None = None, resume: bool = False
) -> RunConfig:
    """The checked RunConfig of `settings` (None: not given), `file` and, with `resume`, the
    run directory's saved settings."""
    base: dict[str, Any] = {}
    if resume:
        out = settings.get("out") or (read_toml(file) if file else {}).get("out") or RunConfig.out
        base = RunDir(Path(out)).saved_config()
    config = resolve_config(file=file, flags=settings, base=base)
    check_tracking(config)  # a tracker asked for by name but not installed: before any write
    if config.store is None:
        config = dataclasses.replace(config, store=str(ensure_default_store(config)))
    if resume:
        check_same_run(base, config)
    return config
