"""Generated sources (MNIST-1D, synthetic), the stratified train/test split, data validation
(labels, shapes and values checked before a store is written), and `dane prepare` then
`dane info` from the command line."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import RawDataset, SourceOptions, check_raw_dataset, load_source
from dask_dane.datasets.store import open_store, write_store
from dask_dane.pipeline.engine.round.shards import load_shard

# --- validation of the data on prepare --------------------------------------------------------


def _raw(**overrides) -> RawDataset:
    fields = dict(
        source="test",
        task="classification",
        num_classes=3,
        x_train=np.zeros((6, 1, 4, 4), np.float32),
        y_train=np.array([0, 1, 2, 0, 1, 2]),
        x_test=np.zeros((3, 1, 4, 4), np.float32),
        y_test=np.array([0, 1, 2]),
    )
    return RawDataset(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"y_train": np.array([0, 1, 2, 0, 1, 3])}, r"1 train label\(s\) outside \[0, 3\), e.g. 3"),
        ({"y_test": np.array([0, -1, 2])}, r"1 test label\(s\) outside \[0, 3\), e.g. -1"),
        ({"y_train": np.arange(5)}, "6 samples but labels of shape"),
        ({"x_test": np.zeros((3, 1, 4, 5), np.float32)}, "same sample shape"),
        ({"y_test": np.array([0.0, 1.0, 2.0])}, "use integer labels"),
    ],
    ids=["label-too-big", "negative-label", "row-mismatch", "shape-mismatch", "float-labels"],
)
def test_bad_labels_and_shapes_are_refused_before_writing(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        write_store(_raw(**overrides), PartitionSpec(), tmp_path / "s.zarr", force=False)
    assert not (tmp_path / "s.zarr").exists()


def test_nan_and_inf_features_are_refused_with_the_row():
    x = np.zeros((6, 1, 4, 4), np.float32)
    x[4, 0, 1, 2] = np.inf
    with pytest.raises(ValueError, match=r"1 train sample\(s\) contain NaN .*row 4"):
        check_raw_dataset(_raw(x_train=x))

    y = np.array([0.5, np.nan, 1.0])
    with pytest.raises(ValueError, match="targets contain NaN"):
        check_raw_dataset(_raw(task="regression", num_classes=1, y_test=y))


def test_npz_negative_labels_fail_on_prepare(tmp_path):
    x = np.zeros((4, 3), np.float32)
    y = np.array([0, 1, -1, 1])
    np.savez(tmp_path / "d.npz", x_train=x, y_train=y, x_test=x, y_test=np.ones(4, int))
    raw = load_source(f"npz:{tmp_path / 'd.npz'}", SourceOptions())

    with pytest.raises(ValueError, match=r"outside \[0, 2\), e.g. -1"):
        write_store(raw, PartitionSpec(), tmp_path / "s.zarr", force=False)


# --- mnist-1d ---------------------------------------------------------------------------------


def test_mnist1d_generates_a_seeded_split_of_signals_and_leaves_global_rngs_alone():
    np.random.seed(123)
    random.seed(123)
    before = (np.random.random(), random.random())
    np.random.seed(123)
    random.seed(123)

    raw = load_source("mnist-1d", SourceOptions(samples=200))
    again = load_source("mnist-1d", SourceOptions(samples=200))
    other = load_source("mnist-1d", SourceOptions(samples=200, seed=1))

    assert (np.random.random(), random.random()) == before
    assert raw.x_train.shape == (160, 1, 40) and raw.x_test.shape == (40, 1, 40)
    assert raw.x_train.dtype == np.float32 and raw.num_classes == 10
    assert set(np.unique(raw.y_train)) == set(range(10))
    np.testing.assert_array_equal(raw.x_train, again.x_train)
    assert not np.array_equal(raw.x_train, other.x_train)


def test_signal_store_normalises_per_channel_over_the_length_axis(tmp_path):
    raw = load_source("mnist-1d", SourceOptions(samples=200))
    shifted = replace(raw, x_train=raw.x_train * 3 + 5)

    info = write_store(shifted, PartitionSpec(num_shards=2), tmp_path / "m.zarr", force=False)
    shard = load_shard(
        info.path,
        split="train",
        start=0,
        stop=info.num_train,
        index=0,
        task=info.task,
        normalization=info.normalization,
        dtype="float64",
    )

    assert info.sample_shape == (1, 40)
    assert info.normalization["mean"][0] == pytest.approx(float(shifted.x_train.mean()), rel=1e-6)
    assert info.normalization["std"][0] == pytest.approx(float(shifted.x_train.std()), rel=1e-5)
    assert tuple(shard.x.shape) == (160, 1, 40)
    features = shard.x.dense()
    assert float(features.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(features.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)


def test_cli_prepare_mnist1d_then_info(tmp_path, dane_here):
    # In this process (dane_here): what is checked is the commands' output and exit status.
    store = tmp_path / "m1d.zarr"

    prepared = dane_here(
        "prepare", "mnist-1d", "--samples", "300", "--shards", "3", "--out", str(store),
        cwd=tmp_path,
    )  # fmt: skip
    shown = dane_here("info", str(store), cwd=tmp_path)
    missing = dane_here(
        "prepare", f"idx:{tmp_path / 'absent'}", "--out", str(tmp_path / "x.zarr"), cwd=tmp_path
    )

    assert prepared.returncode == 0, prepared.stderr
    assert "240 train / 60 test samples of shape (1, 40), 3 shards" in prepared.stdout
    assert shown.returncode == 0, shown.stderr
    assert "source:         mnist-1d" in shown.stdout
    assert "x (240, 1, 40) float32" in shown.stdout
    assert shown.stdout.count("  shard ") == 3
    assert open_store(store).num_train == 240
    assert missing.returncode == 2
    assert "is not a directory" in missing.stderr and "Traceback" not in missing.stderr


def test_cli_prepare_help_renders_the_source_and_path_options():
    # Rich reads [..] in help texts as markup: a path in brackets once broke --help.
    shown = subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", "prepare", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )

    assert shown.returncode == 0, shown.stderr
    assert (
        "idx:DIR | npz:FILE" in shown.stdout and "/usr/share/datasets/fashion-mnist" in shown.stdout
    )


def test_the_synthetic_source_is_a_function_of_its_seed():
    options = SourceOptions(samples=120, image_size=6, seed=3)

    first, again = load_source("synthetic", options), load_source("synthetic", options)
    other = load_source("synthetic", SourceOptions(samples=120, image_size=6, seed=4))

    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.x_train, other.x_train)


def test_the_train_test_split_keeps_each_class_in_proportion():
    from dask_dane.datasets.raw import split_train_test

    y = np.repeat(np.arange(4), [100, 40, 20, 10])  # skewed class sizes
    x = np.arange(len(y))[:, None]

    x_train, y_train, x_test, y_test = split_train_test(x, y, test_fraction=0.2, seed=1)

    assert np.bincount(y_test).tolist() == [20, 8, 4, 2]  # round(0.2 n) of every class
    assert np.bincount(y_train).tolist() == [80, 32, 16, 8]
    rows = np.concatenate([x_train[:, 0], x_test[:, 0]])
    assert sorted(rows.tolist()) == list(range(len(y)))  # every row once, none lost or doubled
    np.testing.assert_array_equal(y[x_test[:, 0]], y_test)  # rows keep their labels
