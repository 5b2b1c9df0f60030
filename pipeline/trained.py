"""A trained model out of a run directory: as an nn.Module (dask_dane.load), or as a file
that plain PyTorch loads without dask-dane (dane export). Scored on a store or applied to new
images (dane evaluate, dane predict): predict.py.

A checkpoint holds the flat weights, the buffers, the run's configuration and what feeding
the model needs (run_state.model_info: sample shape, classes, the store's normalisation), so
that neither the store nor the cluster is needed here. An exported file carries what using
the model needs (class names, normalisation, sample shape) and which round it holds, as JSON
(export_metadata): torch.export's extra file METADATA_FILE, or keys beside the state dict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..datasets.images import read_class_names
from ..models.flat import load_state
from ..models.registry import ModelSpec, build_model
from ..models.user import is_import_path, to_bytes
from .engine.run.checkpoint import atomic_write_bytes, load_checkpoint
from .engine.run.rundir import RunDir

FORMATS = ("program", "state-dict")
CHECKPOINTS = ("best", "latest")
METADATA_FILE = "dask_dane.json"  # the program's extra file: torch.export.load(extra_files=)
_FIX = "pass the --out of a `dane train`"


def run_dir_of(run_dir: str | Path) -> RunDir:
    """A trained run's directory; ValueError naming what is missing, worded for the commands
    that read a finished run (evaluate, export, load)."""
    from ..datasets.store.mistaken import is_store, store_not_run

    run = RunDir(Path(run_dir))
    if is_store(run.root):
        raise ValueError(store_not_run(run_dir))
    if not run.root.is_dir():
        raise ValueError(f"{run.root} is not a run directory; {_FIX}")
    return run


def read_trained(run_dir: str | Path, *, best: bool = False) -> dict[str, Any]:
    """The checkpoint of a run (latest or best); ValueError naming what is missing."""
    run = run_dir_of(run_dir)
    saved = load_checkpoint(run.best if best else run.latest)
    if "model" not in saved:
        raise ValueError(
            f"the checkpoint in {run.root} predates model export (no model record); "
            "train again with this version, or continue it with --resume for one round"
        )
    return saved


def build_trained(
    saved: dict[str, Any], run_dir: str | Path, model: Callable[..., nn.Module] | None
) -> nn.Module:
    """The run's model with the trained weights and buffers of `saved`, a checkpoint read by
    read_trained, in eval mode, on the CPU. `model` is needed only for a run trained from a
    Python callable (dask_dane.train(model=fn)), whose builder no import path can rebuild."""
    info, config = saved["model"], saved["config"]
    name = info["name"]
    if model is None and is_import_path(name) and name.split(":")[0] == "__main__":
        raise ValueError(
            f"the run in {run_dir} trained a callable defined in a notebook or script "
            f"({name}); from Python, pass it again: dask_dane.load(run_dir, model=fn), or "
            "export with TrainResult.export(FILE)"
        )
    spec = ModelSpec(
        name=name,
        sample_shape=tuple(info["sample_shape"]),
        num_classes=int(info["num_classes"]),
        dtype=config["dtype"],
        builder=to_bytes(model) if model is not None else b"",
    )
    network = build_model(spec)
    if sum(p.numel() for p in network.parameters()) != saved["weights"].numel():
        raise ValueError(f"the checkpoint in {run_dir} does not fit model {name!r}")
    return load_state(network, saved["weights"], saved.get("buffers") or {}).eval()


class NormalizedModel(nn.Module):
    """Samples as the store holds them (raw pixels for uint8 images) -> the model's output."""

    def __init__(self, model: nn.Module, normalization: dict, sample_ndim: int) -> None:
        super().__init__()
        self.model = model
        shape = (1, -1, *[1] * (sample_ndim - 1)) if sample_ndim >= 2 else (1, -1)
        dtype = next(model.parameters()).dtype
        mean = torch.tensor(normalization["mean"], dtype=dtype).view(shape)
        std = torch.tensor(normalization["std"], dtype=dtype).view(shape)
        self.per_channel = sample_ndim >= 2  # the workers normalise signals and images only
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.mean.dtype)
        if self.per_channel:
            x = (x - self.mean) / self.std
        return self.model(x)


@dataclass(frozen=True)
class Chosen:
    """The checkpoint an export reads: which one, its contents and what it scored."""

    which: str  # "best" or "latest": the file read
    saved: dict[str, Any]
    test_accuracy: float | None  # the test accuracy of its round, None if not evaluated
    # best.pt's selection: ("val_accuracy" or "val_loss", its value); None: no validation.
    selected_on: tuple[str, float] | None = None
    fell_back: bool = False  # best asked, but the run has no best.pt: latest read

    @property
    def round(self) -> int:
        return int(self.saved["round"])

    def describe(self) -> str:
        """`the best checkpoint, round 4, test accuracy 0.8810 (...why it is the best)`."""
        accuracy = self.test_accuracy
        tested = "no test accuracy" if accuracy is None else f"test accuracy {accuracy:.4f}"
        line = f"the {self.which} checkpoint, round {self.round}, {tested}"
        if self.fell_back:
            return f"{line} (the run has no best checkpoint: no round was selected)"
        if self.which == "latest":
            return line
        if self.selected_on is None:
            return f"{line} (the last evaluated round: no validation split)"
        metric, value = self.selected_on
        return f"{line} (selected on {metric.replace('val_', 'validation ')} {value:.4f})"


def choose_checkpoint(run_dir: str | Path, which: str) -> Chosen:
    """The run's best (best.pt; latest.pt where the run has none) or latest checkpoint, with
    the test accuracy of its round; ValueError for another `which` or a missing run."""
    if which not in CHECKPOINTS:
        raise ValueError(f"unknown --checkpoint {which!r}; choose one of: {', '.join(CHECKPOINTS)}")
    run = run_dir_of(run_dir)
    fell_back = which == "best" and not run.best.exists() and run.latest.exists()
    which = "latest" if fell_back else which
    saved = read_trained(run_dir, best=which == "best")
    tested = {row["round"]: row.get("test_accuracy") for row in run.rows()}
    accuracy = tested.get(int(saved["round"]))
    if which == "latest":
        return Chosen(which, saved, accuracy, fell_back=fell_back)
    score = float(saved.get("best_score", -math.inf))  # -inf: selected without validation
    selected_on = None
    if score > -math.inf:  # the score is the validation accuracy, or minus the loss
        regression = saved["model"].get("task") == "regression"
        selected_on = ("val_loss", -score) if regression else ("val_accuracy", score)
    return Chosen(which, saved, saved.get("test_accuracy_at_best", accuracy), selected_on)


def export_model(
    run_dir: str | Path,
    out: str | Path,
    *,
    checkpoint: str = "latest",
    form: str = "program",
    model: Callable[..., nn.Module] | None = None,
) -> Path:
    """Write the run's model to `out`: a torch.export program or a state dict; returns `out`."""
    return export_checkpoint(run_dir, out, checkpoint=checkpoint, form=form, model=model)[0]


def export_checkpoint(
    run_dir: str | Path,
    out: str | Path,
    *,
    checkpoint: str,
    form: str = "program",
    model: Callable[..., nn.Module] | None = None,
) -> tuple[Path, Chosen]:
    """export_model, and the checkpoint written (Chosen: which, its round and accuracy)."""
    check_export_target(out, form)
    chosen = choose_checkpoint(run_dir, checkpoint)  # read once: the module and its record
    saved = chosen.saved
    network = build_trained(saved, run_dir, model)
    metadata = export_metadata(saved["model"], class_names(saved), chosen)
    return export_module(network, saved["model"], out, form=form, metadata=metadata), chosen


def class_names(saved: dict[str, Any]) -> list[str] | None:
    """The class names of a checkpoint's run: its model record's, or its store's attribute
    where the store is still a folder here (image folders and CIFAR record them); None."""
    if (names := saved["model"].get("class_names")) is not None:
        return list(names)
    store = saved.get("config", {}).get("store")
    if not store or not Path(store).is_dir():
        return None
    try:
        return read_class_names(store)
    except Exception:  # a store moved, rewritten or unreadable: the names are a courtesy
        return None


def export_metadata(
    info: dict[str, Any], classes: list[str] | None, chosen: Chosen | None = None
) -> dict[str, Any]:
    """What using an exported model needs, and the round it holds: METADATA_FILE's JSON."""
    normalization = info["normalization"]
    metadata = {
        "classes": classes,
        "num_classes": info["num_classes"],
        "task": info["task"],
        "mean": normalization["mean"],
        "std": normalization["std"],
        "sample_shape": list(info["sample_shape"]),
        "model": info["name"],
    }
    if chosen is not None:
        metric, value = chosen.selected_on or (None, None)
        metadata |= {"checkpoint": chosen.which, "round": chosen.round}
        metadata |= {"test_accuracy": chosen.test_accuracy, "selected_on": metric}
        metadata |= {metric: value} if metric else {}
    return metadata


def check_export_target(out: str | Path, form: str) -> None:
    """ValueError before any work if `form` is unknown or `out`'s folder is missing."""
    if form not in FORMATS:
        raise ValueError(f"unknown --format {form!r}; choose one of: {', '.join(FORMATS)}")
    if not Path(out).parent.is_dir():
        raise ValueError(
            f"folder {Path(out).parent} does not exist; create it or choose another --out"
        )


def export_module(
    network: nn.Module,
    info: dict,
    out: str | Path,
    *,
    form: str,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a trained module (with the run's model record `info`) as `form` to `out`, with
    `metadata` (export_metadata; by default the record's, without a round)."""
    check_export_target(out, form)
    out = Path(out)
    network = network.eval()
    metadata = metadata if metadata is not None else export_metadata(info, None)
    if form == "state-dict":
        # The metadata's keys beside the state dict: the same as the program's JSON file.
        payload = {**metadata, "state_dict": network.state_dict()}
        payload["normalization"] = info["normalization"]
        atomic_write_bytes(out, lambda handle: torch.save(payload, handle))
        return out
    wrapped = NormalizedModel(network, info["normalization"], len(info["sample_shape"])).eval()
    example = torch.zeros((2, *info["sample_shape"]), dtype=torch.float32)
    try:
        program = torch.export.export(
            wrapped, (example,), dynamic_shapes=({0: torch.export.Dim("batch", min=1)},)
        )
    except Exception as err:  # torch.export refuses some Python control flow
        raise ValueError(
            f"torch.export cannot trace model {info['name']!r} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); use --format state-dict"
        ) from None
    extra = {METADATA_FILE: json.dumps(metadata)}
    atomic_write_bytes(out, lambda handle: torch.export.save(program, handle, extra_files=extra))
    return out
