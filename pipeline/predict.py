"""A trained run applied to data, in this process, no cluster needed: scored on a store's
test split (`dane evaluate`, the run's own store or another one), or its class for each new
image of a folder or row of a store (`dane predict`).

Both read the run's best checkpoint by default, as `dane export` does. Data from elsewhere is
fed as the run's store was: normalised with the run's statistics (the checkpoint's model
record), images decoded to the run's channels and resized to its size, as `dane prepare
images:DIR --image-size` does.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..datasets.store import open_store
from ..datasets.store.mistaken import is_store
from .engine.round import tasks
from .engine.round.shards import load_shard
from .engine.run.checkpoint import load_checkpoint
from .setup.config import RunConfig
from .setup.run_file import saved_config
from .setup.run_setup import prepare_run
from .trained import (
    NormalizedModel,
    build_trained,
    choose_checkpoint,
    class_names,
    run_dir_of,
)

_FIX = "pass the --out of a `dane train`"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm")
BATCH = 256  # samples a forward pass: memory stays small for a folder of any size


def evaluate_checkpoint(
    run_dir: str | Path, *, best: bool = True, store: str | Path | None = None
) -> tuple[Path, int, dict[str, float]]:
    """(checkpoint, round, {loss, accuracy}) of the run's best checkpoint (latest.pt where
    the run has no best.pt, or with best=False), scored on the test split of its store or of
    `store`, with the settings its latest rounds ran with."""
    run = run_dir_of(run_dir)
    if not run.config.exists():
        # RunDir's own message is --resume's ("drop --resume"): evaluate has none.
        raise ValueError(f"{run.root} holds no run (no config.toml); {_FIX}")
    config = RunConfig(**saved_config(run))
    config = dataclasses.replace(config, store=str(store) if store else config.store)
    checkpoint = run.best if best and run.best.exists() else run.latest
    saved = load_checkpoint(checkpoint)
    if store is not None:
        other = open_store(store)
        check_fits(saved["model"], other.sample_shape, str(store), other.num_classes)
    setup = prepare_run(config.validate())
    weights = saved["weights"].to(getattr(torch, config.dtype))
    if weights.numel() != setup.weights.numel():  # the model as prepare_run built it
        raise ValueError(f"checkpoint {checkpoint} does not fit model {config.model!r}")
    # Another store's rows are normalised as the run's were, with the run's statistics.
    test = setup.test_args() | {"normalization": saved["model"]["normalization"]}
    scores = tasks.evaluate(setup.spec, load_shard(**test), weights, saved.get("buffers") or {})
    return checkpoint, int(saved["round"]), scores


def check_fits(
    info: dict[str, Any], shape: tuple[int, ...], where: str, num_classes: int | None = None
) -> None:
    """ValueError naming both where samples of `shape` (or `num_classes` classes) do not fit
    the run's model."""
    expected = tuple(info["sample_shape"])
    if num_classes is not None and num_classes != int(info["num_classes"]):
        raise ValueError(
            f"{where} holds {num_classes} classes, and the run's model {info['num_classes']}; "
            "pass a store of the run's classes"
        )
    if tuple(shape) == expected:
        return
    fix = ""
    if len(expected) == 3:
        size = f"{expected[1]}x{expected[2]}"
        fix = f"; prepare it with --image-size {size} --channels {expected[0]}"
    raise ValueError(
        f"{where} holds samples of shape {tuple(shape)}, and the run's model takes "
        f"{expected} (channels, height, width as its store held them){fix}"
    )


def predict(
    run_dir: str | Path, source: str | Path, *, checkpoint: str = "best"
) -> list[tuple[str, str, float]]:
    """(file, class, probability) for each image of the folder `source` (searched
    recursively, in sorted order) or each test row of the store `source` (named
    `test/ROW`), by the run's `checkpoint` (best or latest)."""
    chosen = choose_checkpoint(run_dir, checkpoint)
    info = chosen.saved["model"]
    if info.get("task") == "regression":
        raise ValueError(f"the run in {run_dir} is a regression: it has no classes to predict")
    names, samples = read_inputs(Path(source), info)
    network = build_trained(chosen.saved, run_dir, None)
    model = NormalizedModel(network, info["normalization"], len(info["sample_shape"])).eval()
    with torch.no_grad():
        batches = [torch.as_tensor(samples[i : i + BATCH]) for i in range(0, len(names), BATCH)]
        probabilities = torch.cat([model(x).softmax(dim=1) for x in batches])
    best, index = probabilities.max(dim=1)
    classes = class_names(chosen.saved) or [str(k) for k in range(int(info["num_classes"]))]
    return [
        (name, classes[k], float(p))
        for name, k, p in zip(names, index.tolist(), best.tolist(), strict=True)
    ]


def read_inputs(source: Path, info: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    """The names and samples (as a store holds them) of a store's test split or a folder's
    images; ValueError naming what `source` is not."""
    if is_store(source):
        import zarr

        check_fits(info, open_store(source).sample_shape, str(source))
        x = zarr.open_group(str(source), mode="r")["test/x"][:]
        return [f"test/{row}" for row in range(len(x))], x
    if not source.is_dir():
        raise ValueError(
            f"{source} is neither a folder of images nor a store; pass a folder of images "
            "or a store written by `dane prepare`"
        )
    if len(shape := tuple(info["sample_shape"])) != 3:
        raise ValueError(
            f"the run's model takes samples of shape {shape}, not images; give a store"
        )
    files = sorted(
        p
        for p in source.rglob("*")
        if p.suffix.lower() in IMAGE_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(source).parts)
    )
    if not files:
        raise ValueError(f"{source} holds no images ({', '.join(IMAGE_SUFFIXES)}); add some")
    from ..datasets.images import decode_images

    mode = {1: "L", 3: "RGB"}.get(shape[0])
    if mode is None:
        raise ValueError(f"the run's model takes {shape[0]} channels; images have 1 or 3")
    decoded = decode_images([str(p) for p in files], mode=mode, size=shape[1:])
    problem = next((item for item in decoded if isinstance(item, str)), None)
    if problem is not None:
        raise ValueError(problem.split("; ")[0] + "; remove it from the folder")
    return [p.relative_to(source).as_posix() for p in files], np.stack(decoded)


def write_predictions(rows: list[tuple[str, str, float]], out: str | Path) -> Path:
    """`rows` as CSV: a header (file, class, probability), then one row per input."""
    with Path(out).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("file", "class", "probability"))
        writer.writerows((name, label, f"{p:.6f}") for name, label, p in rows)
    return Path(out)
