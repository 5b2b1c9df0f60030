"""config.toml in a run directory: written as a run starts (or resumes), read for --resume,
`dane report` and `dane predict` (docs/reference/formats.md). The settings and their
provenance across resumes are setup/'s; the folder's other files are the engine's
(engine/run/rundir.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..engine.run.checkpoint import atomic_write_bytes
from ..engine.run.rundir import RunDir
from .config import RunConfig, read_record, to_toml
from .resumed import Resume, RunRecord, add_resume, check_same_run


def saved_config(run_dir: RunDir) -> dict[str, Any]:
    """The settings the run's latest rounds ran with (for --resume): those it was started
    with, and what each resume changed."""
    return run_record(run_dir).effective


def run_record(run_dir: RunDir) -> RunRecord:
    """config.toml as written: the original settings and the resumes (setup/resumed.py).

    A file without val_fraction was written before the validation split existed: that run
    trained on every row, so it reads as 0. Today's default would hold rows out of the
    resumed rounds unnoticed, and refuse `--val-fraction 0` as a change of the run. A file
    without shard_memory was written when resident was the default: it resumes resident,
    as it trained (auto could stream, and streamed minibatches are other draws). Only
    here, not in read_record: a --config file that leaves them out means the defaults.
    """
    if not run_dir.config.exists():
        raise ValueError(f"{run_dir.root} holds no run to resume (no config.toml); drop --resume")
    record = read_record(run_dir.config)
    before = {"val_fraction": 0.0, "shard_memory": "resident"}
    missing = {key: value for key, value in before.items() if key not in record.original}
    return dataclasses.replace(record, original={**missing, **record.original})


def write_run_config(
    run_dir: RunDir, config: RunConfig, *, resumed_after: int = 0, notes: tuple[str, ...] = ()
) -> None:
    """config.toml for a run starting with `config`. A resume after round N > 0 keeps the
    file's original settings and adds what it changes as a [[resumed]] table; after no
    round, no round ran with the old settings, and the file starts afresh. `notes`:
    comments after the settings, what the driver decided that no setting says."""
    text = to_toml(config)
    if resumed_after and run_dir.config.exists():
        record = run_record(run_dir)
        resume = Resume(resumed_after, check_same_run(record.effective, config))
        text = to_toml(record.original, resumed=add_resume(record.resumes, resume))
    text += "".join(f"# {line}\n" for line in notes)
    atomic_write_bytes(run_dir.config, lambda h: h.write(text.encode()))


def notes_starting(run_dir: RunDir, start: str) -> tuple[str, ...]:
    """config.toml's comment lines (write_run_config's `notes`) that begin with `start`,
    without the `# `: what a resume writes again (the K a run chose as it started)."""
    if not run_dir.config.exists():
        return ()
    lines = run_dir.config.read_text().splitlines()
    return tuple(line[2:] for line in lines if line.startswith(f"# {start}"))
