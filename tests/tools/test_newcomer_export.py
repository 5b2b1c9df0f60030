"""`dane export` writes the round the run selected (best.pt) unless told otherwise, says which
round and accuracy it wrote, and the file carries the class names and normalisation."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
import zarr

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store

pytestmark = pytest.mark.cluster  # the fixture trains a run

CLASSES = [f"digit {i}" for i in range(10)]


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, dane_here):
    """A run on a store that records its class names, stopped by --patience 1 one round
    after its best validation round: best.pt and latest.pt hold different rounds."""
    root = tmp_path_factory.mktemp("newcomer-export")
    raw = load_source("digits", SourceOptions(seed=0))
    raw = dataclasses.replace(raw, attrs={"class_names": CLASSES})
    write_store(raw, PartitionSpec(num_shards=2, seed=0), root / "named.zarr", force=False)
    done = dane_here(
        "train", "named.zarr", "--algorithm", "fedavg", "--rounds", "8", "--patience", "1",
        "--local-steps", "10", "--out", "run", "--dashboard-address", "127.0.0.1:0", cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((root / "run" / "summary.json").read_text())
    assert summary["best_round"] < summary["rounds"], "the run must stop after its best round"
    return root


def _row(root, round_index: int) -> dict:
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    return next(row for row in rows if row["round"] == round_index)


def _score(program_file, store) -> float:
    program = torch.export.load(program_file).module()
    group = zarr.open_group(str(store), mode="r")
    x, y = torch.from_numpy(group["test/x"][:]).float(), torch.from_numpy(group["test/y"][:])
    with torch.no_grad():
        return (program(x).argmax(1) == y).double().mean().item()


def test_the_default_is_the_best_round_named_and_its_metadata_travels(stopped_run, dane_here):
    summary = json.loads((stopped_run / "run" / "summary.json").read_text())
    best = _row(stopped_run, summary["best_round"])

    done = dane_here("export", "run", "--out", "model.pt2", cwd=stopped_run)

    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"wrote model.pt2 (program): the best checkpoint, round {best['round']}, test accuracy "
        f"{best['test_accuracy']:.4f} (selected on validation accuracy "
        f"{best['val_accuracy']:.4f})\n"
    )
    assert _score(stopped_run / "model.pt2", stopped_run / "named.zarr") == best["test_accuracy"]
    extra = {"dask_dane.json": ""}  # plain torch reads it back
    torch.export.load(stopped_run / "model.pt2", extra_files=extra)
    metadata = json.loads(extra["dask_dane.json"])
    store = zarr.open_group(str(stopped_run / "named.zarr"), mode="r").attrs["normalization"]
    assert metadata["classes"] == CLASSES
    assert (metadata["mean"], metadata["std"]) == (store["mean"], store["std"])
    assert metadata["sample_shape"] == [1, 8, 8]
    assert (metadata["checkpoint"], metadata["round"]) == ("best", best["round"])
    assert metadata["test_accuracy"] == best["test_accuracy"]
    assert metadata["val_accuracy"] == best["val_accuracy"]


def test_latest_is_asked_for_and_the_former_flag_still_works(stopped_run, dane_here):
    rounds = json.loads((stopped_run / "run" / "summary.json").read_text())["rounds"]
    last = _row(stopped_run, rounds)

    latest = dane_here("export", "run", "--out", "l.pt2", "--checkpoint", "latest", cwd=stopped_run)
    former = dane_here("export", "run", "--out", "b.pt2", "--best", cwd=stopped_run)
    not_best = dane_here("export", "run", "--out", "n.pt2", "--no-best", cwd=stopped_run)

    assert latest.stdout == (
        f"wrote l.pt2 (program): the latest checkpoint, round {rounds}, test accuracy "
        f"{last['test_accuracy']:.4f}\n"
    )
    assert _score(stopped_run / "l.pt2", stopped_run / "named.zarr") == last["test_accuracy"]
    assert "the best checkpoint" in former.stdout
    assert f"the latest checkpoint, round {rounds}" in not_best.stdout


def test_the_state_dict_carries_the_same_metadata(stopped_run, dane_here):
    best_round = json.loads((stopped_run / "run" / "summary.json").read_text())["best_round"]

    done = dane_here("export", "run", "--out", "m.pt", "--format", "state-dict", cwd=stopped_run)

    assert done.returncode == 0, done.stderr
    saved = torch.load(stopped_run / "m.pt", weights_only=True)
    assert saved["classes"] == CLASSES and saved["round"] == best_round
    assert saved["mean"] == saved["normalization"]["mean"] and "state_dict" in saved


def test_without_a_best_checkpoint_the_latest_is_written_and_said(stopped_run, dane_here):
    shutil.copytree(stopped_run / "run", stopped_run / "unselected")
    (stopped_run / "unselected" / "checkpoints" / "best.pt").unlink()
    rounds = json.loads((stopped_run / "run" / "summary.json").read_text())["rounds"]

    done = dane_here("export", "unselected", "--out", "u.pt2", cwd=stopped_run)
    unknown = dane_here("export", "run", "--out", "x.pt2", "--checkpoint", "last", cwd=stopped_run)

    assert done.returncode == 0, done.stderr
    assert f"the latest checkpoint, round {rounds}" in done.stdout
    assert "(the run has no best checkpoint: no round was selected)" in done.stdout
    assert unknown.returncode == 2 and not (stopped_run / "x.pt2").exists()
    assert "unknown --checkpoint 'last'; choose one of: best, latest" in unknown.stderr


def test_the_apis_export_writes_the_best_round_too(stopped_run):
    import dask_dane

    run = stopped_run / "run"
    summary = json.loads((run / "summary.json").read_text())
    result = dask_dane.TrainResult(
        model=dask_dane.load(run), history=[], summary=summary, run_dir=run
    )

    written = result.export(stopped_run / "api.pt2")  # before: the last round's weights
    extra = {"dask_dane.json": ""}
    torch.export.load(written, extra_files=extra)
    assert json.loads(extra["dask_dane.json"])["round"] == summary["best_round"]
    latest = result.export(stopped_run / "api-latest.pt2", checkpoint="latest")
    torch.export.load(latest, extra_files=extra)
    assert json.loads(extra["dask_dane.json"])["round"] == summary["rounds"]


def test_the_class_names_travel_in_the_checkpoint_not_only_in_the_store(
    stopped_run, dane_here, tmp_path
):
    # From another folder the run's store path (named.zarr, relative) finds no store.
    done = dane_here("export", str(stopped_run / "run"), "--out", "elsewhere.pt2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    extra = {"dask_dane.json": ""}
    torch.export.load(tmp_path / "elsewhere.pt2", extra_files=extra)
    assert json.loads(extra["dask_dane.json"])["classes"] == CLASSES
