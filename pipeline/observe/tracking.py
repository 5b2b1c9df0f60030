"""Tracking: a run's rounds as TensorBoard scalars and as an MLflow run, chained onto Callbacks.

Both are optional extras (`pip install 'dask-dane[track]'`), imported only when a run starts
writing (on_start): a plain install trains without them and `import dask_dane` stays light.
A tracker that fails prints one line and stops; the run and its directory go on untouched,
since tracking is a copy of what metrics.jsonl and the checkpoints already hold.

Resume: TensorBoard appends to the same folder, its steps continuing from the round resumed
after. MLflow reopens the run recorded in RUN/mlflow.json when the tracking URI is the same
(a new URI starts a new MLflow run): its params stay the original ones (MLflow params are
immutable), each changed setting is tagged `dane.resumed.KEY`, and metrics continue by step.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..algorithms.parts.setting_error import SettingError, flag
from ..setup.config import RunConfig
from .progress import Callbacks

INSTALL = "pip install 'dask-dane[track]'"
AUTO, OFF = "auto", "none"
# Where an sqlite store keeps artifacts: beside the database, not in the current directory
# (MLflow's default, ./mlruns, would scatter artifacts wherever a run is started from).
ARTIFACTS = "mlartifacts"


@dataclass(frozen=True)
class TrackingContext:
    """What the layers above the driver know: how to export the model, which preset."""

    export: Callable[[Path, Path], Path] | None = None  # (run dir, file) -> file written
    preset: str | None = None


def preset_of(file: object) -> str | None:
    """The preset a `--config preset:NAME` names, for the MLflow run's tag; None otherwise."""
    text = str(file or "")
    return text.removeprefix("preset:") if text.startswith("preset:") else None


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None  # finds without importing it


def check_tracking(config: RunConfig) -> None:
    """SettingError if a tracker asked for by name is not installed (auto is never refused)."""
    wanted = {"mlflow": config.mlflow, "tensorboard": config.tensorboard not in (AUTO, OFF)}
    for name, asked in wanted.items():  # each setting is named after the module it needs
        if asked and not installed(name):
            raise SettingError(f"{flag(name)} needs {name}, not installed here; {INSTALL}")


def tensorboard_dir(config: RunConfig) -> Path | None:
    """The folder TensorBoard writes to, or None: off, or auto without tensorboard."""
    if config.tensorboard == OFF or (config.tensorboard == AUTO and not installed("tensorboard")):
        return None
    return Path(config.out) / "tb" if config.tensorboard == AUTO else Path(config.tensorboard)


def numeric(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's numbers (not the round, not flags, not None)."""
    return {
        key: float(value)
        for key, value in row.items()
        if key != "round" and isinstance(value, int | float) and not isinstance(value, bool)
    }


def trackers(config: RunConfig, *, resume: bool, context: TrackingContext) -> Callbacks:
    """The run's TensorBoard and MLflow trackers as the Callbacks a caller of the engine
    (`dane train`, `dask_dane.train`) chains with its own."""
    return Trackers(config, Path(config.out), resume=resume, context=context).callbacks()


class Trackers:
    """The run's trackers as one Callbacks, plus `finish` at the end of the run."""

    def __init__(
        self, config: RunConfig, run_dir: Path, *, resume: bool, context: TrackingContext
    ) -> None:
        """`run_dir`: the run directory's folder (RunDir.root)."""
        self.config, self.run_dir, self.resume, self.context = config, run_dir, resume, context
        self.tb: Any = None
        self.mlflow: MlflowTracker | None = None

    def callbacks(self) -> Callbacks:
        """on_start opens the writers, on_round logs, the run's end or failure closes them."""
        return Callbacks(
            on_start=self.on_start,
            on_round=self.on_round,
            on_end=lambda summary: self.finish(),
            on_failure=lambda err: self.finish(failed=True),
        )

    def on_start(self, dashboard: str, workers: int) -> None:
        folder = tensorboard_dir(self.config)
        if folder is not None:
            self.tb = self._guard("tensorboard", lambda: _tb_writer(folder))
        if self.config.mlflow:
            self.mlflow = self._guard("mlflow", lambda: MlflowTracker(self))

    def on_round(self, row: dict[str, Any]) -> None:
        values, step = numeric(row), int(row["round"])
        if self.tb is not None:
            self.tb = self._guard("tensorboard", lambda: _tb_round(self.tb, values, step))
        if self.mlflow is not None:
            self.mlflow = self._guard("mlflow", lambda: self.mlflow.log_round(values, step))

    def finish(self, failed: bool = False) -> None:
        """Close the writers; MLflow gets the exported model (unless the run failed)."""
        if self.tb is not None:
            self._guard("tensorboard", self.tb.close)
        if self.mlflow is not None:
            self._guard("mlflow", lambda: self.mlflow.finish(failed))
        self.tb = self.mlflow = None

    def _guard(self, name: str, action: Callable[[], Any]) -> Any:
        """The action's result (the tracker to keep), or None after one line on stderr."""
        try:
            return action()
        except Exception as err:  # any failure: tracking never stops the run
            text = " ".join(str(err).split())[:300]
            print(
                f"dask-dane: {name} tracking stopped ({type(err).__name__}: {text})",
                file=sys.stderr,
            )
            return None


def _tb_writer(folder: Path) -> Any:
    # tensorboard's own writer: no TensorFlow, no torch.utils.tensorboard import chain.
    from tensorboard.summary import Writer

    folder.mkdir(parents=True, exist_ok=True)
    return Writer(str(folder))


# TensorBoard keeps scalars in float32: a figure beyond its range (a diverging run's loss)
# is written as infinity, which it shows, instead of numpy's overflow warning on the terminal.
FLOAT32_MAX = 3.4028234663852886e38


def _tb_round(writer: Any, values: dict[str, float], step: int) -> Any:
    for key, value in values.items():
        beyond = abs(value) > FLOAT32_MAX and not math.isinf(value)
        writer.add_scalar(key, math.copysign(math.inf, value) if beyond else value, step)
    writer.flush()  # a round is on disk as soon as metrics.jsonl has it
    return writer


class MlflowTracker:
    """One MLflow run per dask-dane run, reopened on resume (see the module's docstring)."""

    def __init__(self, owner: Trackers) -> None:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        self.Metric, self.owner = Metric, owner
        config, uri = owner.config, owner.config.mlflow
        self.client = MlflowClient(tracking_uri=uri)
        self.record = owner.run_dir / "mlflow.json"
        saved = json.loads(self.record.read_text()) if self.record.exists() else {}
        tags = {"dane.store": str(config.store), "dane.run_dir": str(owner.run_dir)}
        if owner.context.preset:
            tags["dane.preset"] = owner.context.preset
        params = {k: str(v)[:6000] for k, v in dataclasses.asdict(config).items()}
        if owner.resume and saved.get("tracking_uri") == uri:
            self.run_id = saved["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            old = self.client.get_run(self.run_id).data.params
            tags |= {f"dane.resumed.{k}": v for k, v in params.items() if old.get(k, v) != v}
            params = {k: v for k, v in params.items() if k not in old}
        else:
            run = self.client.create_run(self._experiment(uri), run_name=Path(config.out).name)
            self.run_id = run.info.run_id
            self.record.write_text(json.dumps({"tracking_uri": uri, "run_id": self.run_id}))
        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):  # MLflow takes at most 100 params a call
            self.client.log_batch(self.run_id, params=items[start : start + 100])
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def _experiment(self, uri: str) -> str:
        found = self.client.get_experiment_by_name("dask-dane")
        if found is not None:
            return found.experiment_id
        location = None
        if uri.startswith("sqlite:///"):
            location = (Path(uri.removeprefix("sqlite:///")).parent / ARTIFACTS).absolute()
            location = location.as_uri()
        return self.client.create_experiment("dask-dane", artifact_location=location)

    def log_round(self, values: dict[str, float], step: int) -> MlflowTracker:
        stamp = int(time.time() * 1000)
        metrics = [self.Metric(k, v, stamp, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)
        return self

    def finish(self, failed: bool) -> None:
        export = self.owner.context.export
        if export is not None and not failed:
            with tempfile.TemporaryDirectory() as scratch:
                written = export(self.owner.run_dir, Path(scratch) / "model.pt")
                self.client.log_artifact(self.run_id, str(written), "model")
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
