"""The model on new data: `dane predict` on a folder of images and on a store, `dane evaluate`
on another store, and the docs' snippet that feeds an exported program images, as pasted."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
SHOWN = 5  # test rows written as PNG files


@pytest.fixture(scope="module")
def trained(tmp_path_factory, digits_stores, cluster_client, dane_here) -> Path:
    """A 3-round FedAvg run on the digits store (8x8 grey), on the shared cluster, and its
    first SHOWN test rows as PNG files under photos/ (class-less: new images)."""
    root = tmp_path_factory.mktemp("predict")
    done = dane_here(
        "train", str(digits_stores[2]), "--model", "mlp", "--algorithm", "fedavg",
        "--rounds", "3", "--out", "run", "--scheduler", cluster_client.scheduler.address,
        cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    x = zarr.open_group(str(digits_stores[2]), mode="r")["test/x"][:SHOWN]
    (root / "photos" / "new").mkdir(parents=True)
    for row, pixels in enumerate(x):
        Image.fromarray(pixels[0]).save(root / "photos" / "new" / f"row{row}.png")
    return root


def _read(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_predict_writes_a_row_per_image_as_the_store_rows_predict(
    trained, digits_stores, dane_here
):
    on_images = dane_here("predict", "run", "photos", "--out", "images.csv", cwd=trained)
    on_store = dane_here("predict", "run", str(digits_stores[2]), "--out", "store.csv", cwd=trained)
    again = dane_here("predict", "run", "photos", "--out", "images.csv", cwd=trained)

    assert on_images.returncode == 0 and on_store.returncode == 0, on_images.stderr
    assert on_images.stdout == f"wrote images.csv: {SHOWN} predictions\n"
    images, rows = _read(trained / "images.csv"), _read(trained / "store.csv")
    assert [r["file"] for r in images] == [f"new/row{k}.png" for k in range(SHOWN)]
    # The PNGs hold the store's pixels: the same classes and probabilities as its rows.
    assert [(r["class"], r["probability"]) for r in images] == [
        (r["class"], r["probability"]) for r in rows[:SHOWN]
    ]
    assert all(0.1 <= float(r["probability"]) <= 1 for r in images)
    # On the store, the predicted classes score what `dane evaluate` says of best.pt.
    y = zarr.open_group(str(digits_stores[2]), mode="r")["test/y"][:]
    accuracy = np.mean([int(r["class"]) == label for r, label in zip(rows, y, strict=True)])
    scored = dane_here("evaluate", "run", cwd=trained)
    assert scored.stdout.startswith("best.pt (round ")
    assert accuracy == pytest.approx(float(scored.stdout.split()[-1]), abs=1e-4)
    assert again.returncode == 2 and "already exists; pass --force" in again.stderr


def test_evaluate_scores_the_run_on_another_store_and_refuses_one_of_another_shape(
    trained, digits_stores, dane_here, tmp_path
):
    raw = load_source("synthetic", SourceOptions(samples=60, image_size=16))
    wide = write_store(raw, PartitionSpec(num_shards=1), tmp_path / "wide.zarr", force=False)

    own = dane_here("evaluate", "run", cwd=trained)
    other = dane_here("evaluate", "run", "--store", str(digits_stores[4]), cwd=trained)
    refused = dane_here("evaluate", "run", "--store", str(wide.path), cwd=trained)

    assert other.returncode == 0, other.stderr
    # The same test rows (the split does not depend on the shards): the same figures.
    assert other.stdout == own.stdout.replace(":", f" on {digits_stores[4]}:", 1)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "holds samples of shape (1, 16, 16), and the run's model takes (1, 8, 8)" in (
        refused.stderr
    )
    assert "--image-size 8x8 --channels 1" in refused.stderr


def test_the_docs_snippet_runs_as_pasted_beside_an_export(trained, dane_here):
    page = (ROOT / "docs" / "howto" / "own-model.md").read_text()
    snippet = re.search(r"photos/ -->\n```python\n(.*?)```", page, re.S).group(1)
    exported = dane_here("export", "run", "--out", "photos.pt2", cwd=trained)
    dane_here("predict", "run", "photos", "--out", "predicted.csv", cwd=trained)
    (trained / "snippet.py").write_text(snippet)

    ran = subprocess.run(
        [sys.executable, "snippet.py"], cwd=trained, capture_output=True, text=True, timeout=300
    )

    assert exported.returncode == 0, exported.stderr
    assert ran.returncode == 0, ran.stderr  # before: `images` was never defined
    labels = json.loads(ran.stdout.replace("'", '"'))
    predicted = {Path(r["file"]).name: r["class"] for r in _read(trained / "predicted.csv")}
    assert labels == predicted
