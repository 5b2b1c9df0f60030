"""The Python API behind `import dask_dane`: train, prepare, load, TrainResult.

The names are the CLI's: `train(store, model=..., algorithm=..., **settings)` takes the
`dane train` flags as keywords (local_lr=0.05 for --local-lr) and checks them the same way,
so a notebook and the command line describe a run identically. The defaults shown in the
signatures are the settings' own (RunConfig's and PartitionSpec's fields), not copies.
Errors name the keywords, not the flags (keywords.py); an unknown keyword is a TypeError.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from torch import nn

from ..models.user import callable_name
from . import training
from .api_prepare import prepare
from .engine.run.rundir import RunDir
from .keywords import SETTINGS_KEYWORDS, check_keywords, reword
from .launchers.errors import refuse_in_spawned_import
from .launchers.worker_count import idle_worker_warning
from .observe.progress import Callbacks, ProgressLines, chain
from .observe.tracking import TrackingContext, trackers
from .plan import finished_note, plan_run
from .setup.config import RunConfig, check_settings
from .setup.run_setup import prepare_run
from .trained import build_trained, export_model, read_trained

__all__ = ["Callbacks", "TrainResult", "load", "prepare", "train"]

ModelArg = str | Callable[..., nn.Module]


@dataclass(frozen=True, repr=False)
class TrainResult:
    """A finished run: the trained model, its metrics rows and where it is saved.

    Attributes
    ----------
    model : torch.nn.Module
        The network with the final weights and buffers, in eval mode, on the CPU.
    history : list of dict
        metrics.jsonl's rows, one per round (see `Callbacks.on_round` for the keys).
    summary : dict
        summary.json: the final and best figures and the run's totals.
    run_dir : pathlib.Path
        The run directory (config.toml, metrics.jsonl, checkpoints/, summary.json).
    builder : callable or None
        The callable the model was built from (None for a model given by name): `export`
        rebuilds a checkpoint with it.
    """

    model: nn.Module
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    run_dir: Path
    builder: Callable[..., nn.Module] | None = field(default=None, repr=False)

    @property
    def test_accuracy(self) -> float | None:
        """The last round's test accuracy (None for a regression task)."""
        return self.summary["final_test_accuracy"]

    def export(self, out: str | Path, *, form: str = "program", checkpoint: str = "best") -> Path:
        """Write a checkpoint of the run to a file that plain PyTorch loads, as `dane export`
        does: the model, the class names, the normalisation and the round in its metadata.

        Parameters
        ----------
        out
            The file to write.
        form
            ``"program"`` (a `torch.export` program taking raw samples) or ``"state-dict"``.
        checkpoint
            ``"best"`` (best.pt; the latest where no round was selected) or ``"latest"``
            (the weights of `.model`).

        Returns
        -------
        pathlib.Path
            The file written. Works for a model from a notebook function too, which the
            command line cannot rebuild.
        """
        return export_model(self.run_dir, out, checkpoint=checkpoint, form=form, model=self.builder)

    def __repr__(self) -> str:
        # Short on purpose: the history and the model are attributes to look at, not to dump.
        accuracy = self.test_accuracy
        shown = "None" if accuracy is None else f"{accuracy:.4f}"
        return (
            f"TrainResult(run_dir={str(self.run_dir)!r}, rounds={len(self.history)}, "
            f"test_accuracy={shown}, model={type(self.model).__name__})"
        )


def train(
    store: str | Path | None = None,
    *,
    model: ModelArg = RunConfig.model,
    algorithm: str = RunConfig.algorithm,
    client: Any = None,
    workers: int = RunConfig.workers,
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = True,
    callbacks: Callbacks | None = None,
    **settings: Any,
) -> TrainResult:
    """Train `model` on `store` with `algorithm`; return the trained model and its metrics.

    Parameters
    ----------
    store
        A store written by `prepare` or `dane prepare` (a path or an fsspec URL); None
        trains on the embedded digits data.
    model
        A built-in name (small-cnn, compact-cnn, ...), an import path (FILE.py:NAME,
        package.module:NAME), or a callable returning an nn.Module (a function defined in a
        notebook reaches the workers by value).
    algorithm
        dane, sdane, fedavg, fedprox, feddyn, scaffold, sgd, ...
    client
        A running `distributed.Client` to train on; None starts a LocalCluster of `workers`
        (or, with `cluster="slurm", jobs=N`, a dask-jobqueue cluster of N batch jobs).
    workers
        Workers of the cluster started when `client` is None.
    out
        The run directory; None makes a fresh one, runs/ALGORITHM-N (the next free N), as
        `dane train` does without --out.
    resume
        Continue the run in `out` (None: the newest run under runs/).
    progress
        Print a line as the run starts and one per round (round, train loss, test
        accuracy), on stderr or in the notebook; False prints nothing.
    callbacks
        A `Callbacks` whose functions are called at the start, after each round with its
        metrics row, and with each round's weights.
    **settings
        Any `dane train` flag by its Python name (rounds=10, local_lr=0.05, augment="flip",
        cluster="slurm", jobs=4, job_directives="--gres=gpu:1").

    Returns
    -------
    TrainResult
        `.model`, `.history`, `.test_accuracy`, `.summary` and `.run_dir`.

    Raises
    ------
    TypeError
        For a keyword that is no setting, naming the closest one.
    ValueError
        For a bad setting or combination, naming the keywords and the fix; nothing is
        written then.
    """
    refuse_in_spawned_import()  # a worker re-running a script without a main guard
    check_keywords(settings, SETTINGS_KEYWORDS - _OWN, "dask_dane.train", named=_OWN)
    builder = None if isinstance(model, str) else model
    settings = {**settings, "algorithm": algorithm, "workers": workers}
    lines = ProgressLines() if progress else None
    watchers = [lines.callbacks()] if lines is not None else []
    watchers += [callbacks] if callbacks is not None else []
    try:
        config = _train_config(store, model, out, resume=resume, settings=settings)
        setup = prepare_run(config, builder)  # the run's store, model and strategy, once
        idle = idle_worker_warning(config, setup.store.num_shards)  # a warning; jobs refused
        if lines is not None:
            lines.begin(config, resume=resume, strategy=setup.strategy)
            for line in (idle, _nothing_left(config) if resume else None):
                if line is not None:
                    lines.note(line)
        export = partial(export_model, form="state-dict", model=builder)  # MLflow's artifact
        tracked = trackers(config, resume=resume, context=TrackingContext(export=export))
        summary = training.train(
            config,
            resume=resume,
            callbacks=chain(*watchers, tracked),
            client=client,
            model=builder,
            setup=setup,
        )
    except ValueError as err:  # a SettingError, a refused resume, a diverged run
        reword(err)
        raise
    run_dir = RunDir(Path(config.out))
    if lines is not None:
        lines.end(summary, run_dir.root)
    return TrainResult(
        model=load(run_dir.root, model=builder),
        builder=builder,
        history=run_dir.rows(),
        summary=summary,
        run_dir=run_dir.root,
    )


# train's own parameters; every other keyword is a `dane train` setting.
_OWN = set(inspect.signature(train).parameters) - {"settings"}


def _train_config(
    store: str | Path | None,
    model: ModelArg,
    out: str | Path | None,
    *,
    resume: bool,
    settings: dict[str, Any],
) -> RunConfig:
    """The RunConfig of `train`'s arguments: keywords checked as `dane train` checks its
    flags, then planned as the CLI plans them (plan_run: resume, the default store)."""
    flags = check_settings(settings, "dask_dane.train", noun="keyword")
    flags["model"] = model if isinstance(model, str) else callable_name(model)
    flags["out"] = None if out is None else str(out)  # None: a fresh folder (plan_run)
    flags["store"] = None if store is None else str(store)
    return plan_run(flags, resume=resume)


def _nothing_left(config: RunConfig) -> str | None:
    """For resume=True on a run that already trained its rounds: say that this call trains
    nothing, rather than show the old result as if it had."""
    words = {"resume": "resume=True", "more_rounds": "rounds="}
    note = finished_note(config.out, config.rounds, **words)
    return None if note is None else f"dask-dane: {note}"


def load(
    run_dir: str | Path, *, best: bool = False, model: Callable[..., nn.Module] | None = None
) -> nn.Module:
    """The trained model of a run directory, as an nn.Module.

    Parameters
    ----------
    run_dir
        A run directory written by `train` or `dane train`.
    best
        The checkpoint of the best evaluated round rather than the last one.
    model
        The callable the run was trained from, needed again only when it was defined in a
        notebook or a script (a model named by FILE.py:NAME or a package path is rebuilt).

    Returns
    -------
    torch.nn.Module
        The network with its trained weights and buffers, in eval mode, on the CPU. It takes
        inputs normalised as the workers saw them (the store's per-channel mean and std).

    Raises
    ------
    ValueError
        If `run_dir` holds no run, or the model cannot be rebuilt without `model`.
    """
    try:
        return build_trained(read_trained(run_dir, best=best), run_dir, model)
    except ValueError as err:
        reword(err)
        raise
