"""One run's plan: (a config file, flags or keywords, resume) turned into its RunConfig once.

The command line (`dane train`) and the Python API (`dask_dane.train`) both call `plan_run`,
so a run described either way resolves the same, in one pass:
    built-in defaults < the saved config.toml (resume) < the TOML file < flags or keywords,
checked once (RunConfig.validate); then the embedded default store is written if no store
is named (after the checks, so that bad input writes nothing), and a resume is held to the
same run (check_same_run: only resumed.RESUMABLE_KEYS may change; begin_run records them).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

from .algorithms.parts.setting_error import SettingError, setting
from .engine.run.rundir import RunDir
from .launchers.cluster_checks import refuse_missing_gpu
from .launchers.jobqueue import check_job_queue
from .observe.progress import plural
from .observe.tracking import check_tracking
from .setup.config import RunConfig, read_toml
from .setup.epochs import COUNT_OF_EPOCHS
from .setup.resumed import check_same_run
from .setup.run_file import saved_config
from .setup.run_setup import ensure_default_store
from .setup.settings import read_broadcast


def plan_run(
    settings: dict[str, Any], *, file: str | Path | None = None, resume: bool = False
) -> RunConfig:
    """The checked RunConfig of `settings` (None: not given), `file` and, with `resume`, the
    run directory's saved settings."""
    filed = read_toml(file) if file else {}  # read once: _one_source looks at it again
    given = {key: value for key, value in settings.items() if value is not None}
    if "broadcast" in given:  # files and keywords are read so by check_settings
        given["broadcast"] = _read_broadcast_flag(given["broadcast"])
    out = given.get("out") or filed.get("out")
    base: dict[str, Any] = {}
    if resume:
        out = out or newest_run_dir()
        base = saved_config(RunDir(Path(out)))
    layered = {**base, **filed, **given}  # each layer over the last
    fresh = fresh_run_dir(layered.get("algorithm", RunConfig.algorithm))
    config = RunConfig(**{**layered, "out": str(out or fresh)})
    for epochs, count in COUNT_OF_EPOCHS.items():  # setup/epochs.py
        config = _one_source(config, given, filed, count, epochs)
    config = _one_source_of_k(config, given, filed, resume=resume)
    config = config.validate()  # once, the settings as the run will have them
    check_tracking(config)  # a tracker asked for by name but not installed: before any write
    check_job_queue(config)  # --cluster slurm without dask-jobqueue or sbatch: the same
    refuse_missing_gpu(config)  # --device cuda on a machine without one: the same
    if config.store is None:
        config = dataclasses.replace(config, store=str(ensure_default_store(config)))
    if resume:
        check_same_run(base, config)
    return config


def _read_broadcast_flag(flagged: str) -> str:
    """`--broadcast` as it runs now: a former value (reduce) is read as auto, with a note."""
    value, note = read_broadcast(flagged)
    if note is not None:
        print(f"--broadcast {flagged} {note}", file=sys.stderr)
    return value


def _one_source(
    config: RunConfig, given: dict[str, Any], filed: dict[str, Any], count: str, epochs: str
) -> RunConfig:
    """A count is set directly or in epochs (K by local_steps or local_epochs): both in one
    layer (the flags given, or the file) is an error; across layers the flags win, as for
    every setting (a preset's local_epochs gives way to --local-steps on the command line)."""
    both = {count, epochs}
    if both <= given.keys() or (both <= filed.keys() and not both & given.keys()):
        raise SettingError(
            f"{setting(count)} and {setting(epochs)} both set one count, the second in passes "
            "over a shard; give one of them"
        )
    if count in given and epochs not in given and getattr(config, epochs) is not None:
        return dataclasses.replace(config, **{epochs: None})
    return config


# What sets K besides --overhead-share, which chooses it from measurements (parts/local_work.py).
_K_GIVEN = ("local_steps", "local_epochs")


def _one_source_of_k(
    config: RunConfig, given: dict[str, Any], filed: dict[str, Any], *, resume: bool
) -> RunConfig:
    """K given and chosen (--local-steps or --local-epochs with --overhead-share) in one layer is
    an error; across layers the flags win, as in _one_source. A resume trains the K the run
    chose as it started, which its config.toml holds as local_steps."""
    share = "overhead_share"
    for layer, named in ((given, "given"), (filed, "in the file")):
        rival = next((key for key in _K_GIVEN if key in layer), None)
        if share in layer and rival and (layer is given or not {share, *_K_GIVEN} & given.keys()):
            raise SettingError(
                f"{setting(rival)} sets K and {setting(share)} chooses it from costs measured "
                f"as the run starts, both {named}; give one of them"
            )
    if resume and config.overhead_share is not None:  # flags or a file: the saved run has none
        raise SettingError(
            f"{setting(share)} chooses K as a run starts; a resumed run trains the K its "
            f"config.toml records ({setting('local_steps', config.local_steps)}): drop "
            f"{setting(share)}"
        )
    if share in given and config.local_epochs is not None:  # the file's K gives way
        return dataclasses.replace(config, local_epochs=None)
    if any(key in given for key in _K_GIVEN) and share not in given:
        return dataclasses.replace(config, overhead_share=None)
    return config


RUNS = Path("runs")  # where fresh run folders go, under the working directory


def fresh_run_dir(algorithm: str, root: Path = RUNS) -> Path:
    """root/ALGORITHM-N with N one past the highest taken: dane-1, dane-2, ... A folder is
    not created here (a run refused by its checks leaves nothing); one that a refused or
    failed run left empty is skipped all the same, as its number is taken."""
    pattern = re.compile(rf"{re.escape(algorithm)}-(\d+)")
    taken = [
        int(match.group(1))
        for entry in (root.iterdir() if root.is_dir() else ())
        if (match := pattern.fullmatch(entry.name))
    ]
    return root / f"{algorithm}-{max(taken, default=0) + 1}"


def newest_run_dir(root: Path = RUNS) -> Path:
    """The run under root whose metrics changed last (`--resume` without `--out`);
    ValueError when root holds none."""
    runs = [entry for entry in root.glob("*") if (entry / "config.toml").is_file()]
    if not runs:
        raise ValueError(
            f"--resume without --out continues the newest run in {root}/, and there is none; "
            "pass --out RUN_DIR"
        )
    return max(runs, key=lambda run: _last_change(RunDir(run)))


def _last_change(run: RunDir) -> float:
    return max(path.stat().st_mtime for path in (run.config, run.metrics) if path.exists())


def finished_note(out: str, planned: int, *, resume: str, more_rounds: str) -> str | None:
    """For a resume of a run that already trained its `planned` rounds: that this call trains
    nothing, rather than show the old result as if it had; None where rounds are left.
    `resume` and `more_rounds` are the caller's words (`--resume`, `resume=True`, ...)."""
    done = RunDir(Path(out)).rounds_recorded()
    if done < planned:
        return None
    return (
        f"{out} already finished its {plural(done, 'round')}: nothing to train; pass a larger "
        f"{more_rounds} with {resume} to train on"
    )
