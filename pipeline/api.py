"""The Python API behind `import dask_dane`: train, prepare, load, TrainResult.

The names are the CLI's: `train(store, model=..., algorithm=..., **settings)` takes the
`dane train` flags as keywords (local_lr=0.05 for --local-lr) and checks them the same way,
so a notebook and the command line describe a run identically. The defaults shown in the
signatures are the settings' own (RunConfig's and PartitionSpec's fields), not copies.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..datasets.partition import PartitionSpec
from ..datasets.raw import RawDataset
from ..datasets.store import write_store
from ..models.user import callable_name
from .run import loop
from .run.metrics import read_metrics
from .run.plan import plan_run
from .run.rundir import RunDir
from .setup.config import RunConfig, check_settings
from .trained import export_module, load_model, read_trained

ModelArg = str | Callable[..., nn.Module]


@dataclass(frozen=True)
class TrainResult:
    """A finished run: the trained model, its metrics rows and where it is saved."""

    model: nn.Module  # final weights and buffers, in eval mode, on the CPU
    history: list[dict[str, Any]]  # metrics.jsonl's rows, one per round
    summary: dict[str, Any]  # summary.json
    run_dir: Path

    @property
    def test_accuracy(self) -> float | None:
        """The last round's test accuracy (None for a regression task)."""
        return self.summary["final_test_accuracy"]

    def export(self, out: str | Path, *, form: str = "program") -> Path:
        """Write `.model` as `dane export` does (form: program | state-dict); also for a model
        from a notebook function, which the command line cannot rebuild."""
        return export_module(self.model, read_trained(self.run_dir)["model"], out, form=form)


def train(
    store: str | Path | None = None,
    *,
    model: ModelArg = RunConfig.model,
    algorithm: str = RunConfig.algorithm,
    client: Any = None,
    workers: int = RunConfig.workers,
    out: str | Path | None = None,
    resume: bool = False,
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
        A running `distributed.Client` to train on; None starts a LocalCluster of `workers`.
    workers
        Workers of the cluster started when `client` is None.
    out
        The run directory; None makes a fresh one under ./runs.
    resume
        Continue the run in `out`.
    **settings
        Any `dane train` flag by its Python name (rounds=10, local_lr=0.05, augment="flip").

    Returns
    -------
    TrainResult
        `.model`, `.history`, `.test_accuracy`, `.summary` and `.run_dir`.
    """
    builder = None if isinstance(model, str) else model
    settings = {**settings, "algorithm": algorithm, "workers": workers}
    config = _train_config(store, model, out, resume=resume, settings=settings)
    summary = loop.train(config, resume=resume, client=client, model=builder)
    run_dir = RunDir(Path(config.out))
    return TrainResult(
        model=load_model(run_dir.root, model=builder),
        history=read_metrics(run_dir.metrics),
        summary=summary,
        run_dir=run_dir.root,
    )


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
    flags = check_settings(settings, "dask_dane.train")
    flags["model"] = model if isinstance(model, str) else callable_name(model)
    flags["out"] = str(out) if out is not None else _fresh_run_dir(settings["algorithm"])
    flags["store"] = None if store is None else str(store)
    return plan_run(flags, resume=resume)


def _fresh_run_dir(algorithm: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{algorithm}-{stamp}-{uuid.uuid4().hex[:6]}")


def prepare(
    out: str | Path,
    *,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    shards: int = PartitionSpec.num_shards,
    partition: str = PartitionSpec.kind,
    num_classes: int | None = None,
    seed: int = PartitionSpec.seed,
    alpha: float = PartitionSpec.alpha,
    classes_per_shard: int = PartitionSpec.classes_per_shard,
    force: bool = False,
) -> Path:
    """Write a store from NumPy arrays; return its path.

    x is (N, C, H, W) for images (uint8 or float32), (N, C, L) for signals or (N, d) for
    tabular rows; y holds integer labels (classification) or floats (regression).
    `partition` is iid, label-skew (`classes_per_shard`) or dirichlet (`alpha`).
    """
    (x_train, y_train), (x_test, y_test) = train, test
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    classification = np.issubdtype(y_train.dtype, np.integer)
    if num_classes is None:
        num_classes = int(max(y_train.max(), y_test.max())) + 1 if classification else 1
    raw = RawDataset(
        source="arrays",
        task="classification" if classification else "regression",
        num_classes=num_classes,
        x_train=np.asarray(x_train),
        y_train=y_train.astype(np.int64) if classification else y_train,
        x_test=np.asarray(x_test),
        y_test=y_test.astype(np.int64) if classification else y_test,
    )
    spec = PartitionSpec(
        kind=partition, num_shards=shards, seed=seed, alpha=alpha,
        classes_per_shard=classes_per_shard,
    )  # fmt: skip
    return Path(write_store(raw, spec, out, force=force).path)
