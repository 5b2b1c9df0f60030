"""The zarr store as written: round trip of data and attributes, label histograms, plain JSON
attributes, and atomic writes (an existing store kept or replaced whole, never half-written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import store_datasets
import zarr

from dask_dane.datasets.partition import PartitionSpec, partition_rows
from dask_dane.datasets.store import (
    FORMAT_VERSION,
    label_histograms,
    open_store,
    read_rows,
    write_store,
)
from dask_dane.datasets.store import write as store_module

HERE = Path(__file__).resolve().parents[1]  # tests/


# Fixtures: bound in this module so that pytest finds them for its tests.
digits, synthetic = store_datasets.digits, store_datasets.synthetic


def _attrs(path) -> dict:
    return dict(zarr.open_group(path, mode="r", zarr_format=3).attrs)


def _listing(folder) -> dict[str, int]:
    """Every path under `folder` with its modification time in ns."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_digits_round_trip_keeps_arrays_attributes_and_shard_rows(digits, tmp_path):
    spec = PartitionSpec(kind="label-skew", num_shards=5, classes_per_shard=2, seed=3)
    expected_rows = partition_rows(spec, digits.y_train, digits.num_classes)

    info = write_store(digits, spec, tmp_path / "digits.zarr", force=False)

    assert info.sample_shape == (1, 8, 8)
    assert (info.x_dtype, info.y_dtype) == ("uint8", "int64")
    assert (info.num_train, info.num_test) == (len(digits.y_train), len(digits.y_test))
    assert info.num_train + info.num_test == 1797
    attrs = _attrs(info.path)
    assert attrs["format_version"] == FORMAT_VERSION
    assert (attrs["source"], attrs["task"], attrs["num_classes"]) == (
        "digits",
        "classification",
        10,
    )
    assert attrs["partition"] == {"kind": "label-skew", "seed": 3, "classes_per_shard": 2}
    assert attrs["normalization"]["mean"] == pytest.approx([digits.x_train.mean()])
    assert attrs["normalization"]["std"] == pytest.approx([digits.x_train.std()])
    # Shards: contiguous [start, stop) ranges, in order, covering the train split.
    starts = [start for start, _ in info.shards]
    stops = [stop for _, stop in info.shards]
    assert starts == [0, *stops[:-1]]
    assert stops[-1] == info.num_train
    assert [stop - start for start, stop in info.shards] == [len(r) for r in expected_rows]
    # Each shard's slice holds exactly the rows the partition gave it, in the same order.
    for (start, stop), rows in zip(info.shards, expected_rows, strict=True):
        x, y = read_rows(info.path, "train", start, stop)
        np.testing.assert_array_equal(x, digits.x_train[rows])
        np.testing.assert_array_equal(y, digits.y_train[rows])
    x_test, y_test = read_rows(info.path, "test", 0, info.num_test)
    np.testing.assert_array_equal(x_test, digits.x_test)
    np.testing.assert_array_equal(y_test, digits.y_test)


def test_label_histograms_match_the_partition(digits, tmp_path):
    spec = PartitionSpec(kind="dirichlet", num_shards=4, alpha=0.3, seed=1)
    expected = [
        np.bincount(digits.y_train[rows], minlength=10)
        for rows in partition_rows(spec, digits.y_train, 10)
    ]

    info = write_store(digits, spec, tmp_path / "dirichlet.zarr", force=False)
    histograms = label_histograms(info)

    assert len(histograms) == 4
    for got, want in zip(histograms, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert sum(h.sum() for h in histograms) == info.num_train


def test_synthetic_round_trip_keeps_float_images_and_dirichlet_attrs(synthetic, tmp_path):
    spec = PartitionSpec(kind="dirichlet", num_shards=3, alpha=2.0, seed=7)

    info = write_store(synthetic, spec, tmp_path / "synthetic.zarr", force=False)

    assert info.sample_shape == (1, 12, 12)
    assert (info.x_dtype, info.y_dtype) == ("float32", "int64")
    assert info.num_train + info.num_test == 300
    assert info.num_shards == 3
    attrs = _attrs(info.path)
    assert (attrs["source"], attrs["num_classes"]) == ("synthetic", 10)
    assert attrs["partition"] == {"kind": "dirichlet", "seed": 7, "alpha": 2.0}
    assert set(attrs["normalization"]) == {"mean", "std"}
    assert attrs["normalization"]["mean"] == pytest.approx(
        [np.asarray(synthetic.x_train).mean(dtype=np.float64)], abs=1e-6
    )
    rows = np.concatenate(partition_rows(spec, synthetic.y_train, 10))
    x_all, y_all = read_rows(info.path, "train", 0, info.num_train)
    np.testing.assert_array_equal(x_all, synthetic.x_train[rows])
    np.testing.assert_array_equal(y_all, synthetic.y_train[rows])


def test_write_leaves_no_temporary_folder_beside_the_store(synthetic, tmp_path):
    write_store(synthetic, PartitionSpec(num_shards=2), tmp_path / "s.zarr", force=False)

    assert [p.name for p in tmp_path.iterdir()] == ["s.zarr"]


def test_existing_store_is_kept_without_force(digits, synthetic, tmp_path):
    out = tmp_path / "s.zarr"
    write_store(digits, PartitionSpec(num_shards=2), out, force=False)
    before = _listing(tmp_path)

    with pytest.raises(ValueError, match="--force"):
        write_store(synthetic, PartitionSpec(num_shards=3), out, force=False)

    assert _listing(tmp_path) == before
    assert open_store(out).source == "digits"


def test_existing_store_is_replaced_with_force(digits, synthetic, tmp_path):
    out = tmp_path / "s.zarr"
    write_store(digits, PartitionSpec(num_shards=2), out, force=False)

    info = write_store(synthetic, PartitionSpec(num_shards=3), out, force=True)

    assert (info.source, info.num_shards, info.sample_shape) == ("synthetic", 3, (1, 12, 12))
    assert open_store(out).source == "synthetic"
    assert [p.name for p in tmp_path.iterdir()] == ["s.zarr"]  # the old store is gone too


def test_write_failing_midway_leaves_the_old_store_and_no_temporary_folder(
    digits, synthetic, tmp_path, monkeypatch
):
    out = tmp_path / "s.zarr"
    write_store(digits, PartitionSpec(num_shards=2), out, force=False)
    before = _listing(tmp_path)
    calls = []

    def fail_on_second_array(group, name, data, order=None):
        calls.append(name)
        if len(calls) == 2:
            raise OSError("disk full")
        group.create_array(name, shape=data.shape, dtype=data.dtype)[...] = np.asarray(data)

    monkeypatch.setattr(store_module, "_write_array", fail_on_second_array)

    with pytest.raises(OSError, match="disk full"):
        write_store(synthetic, PartitionSpec(num_shards=2), out, force=True)

    assert _listing(tmp_path) == before
    assert open_store(out).source == "digits"


def test_bad_partition_writes_nothing(synthetic, tmp_path):
    out = tmp_path / "new" / "s.zarr"

    with pytest.raises(ValueError, match="shards"):
        write_store(synthetic, PartitionSpec(num_shards=10_000), out, force=False)

    assert list(tmp_path.iterdir()) == []


def test_store_attributes_are_plain_json(synthetic, tmp_path):
    path = tmp_path / "s.zarr"
    write_store(synthetic, PartitionSpec(kind="iid", num_shards=2, seed=4), path, force=False)

    metadata = json.loads((path / "zarr.json").read_text())

    assert metadata["zarr_format"] == 3
    assert metadata["attributes"]["shards"] == [list(s) for s in open_store(path).shards]
    assert metadata["attributes"]["partition"] == {"kind": "iid", "seed": 4}


def _another_writer_meanwhile(monkeypatch, raw, out) -> None:
    """While this process writes its arrays, another one places its own store at `out` (two
    first runs at once): written and renamed into place before this one renames."""
    write_group = store_module._write_group

    def racing(group, *args):
        write_group(group, *args)
        monkeypatch.setattr(store_module, "_write_group", write_group)
        write_store(raw, PartitionSpec(num_shards=2), out, force=False)

    monkeypatch.setattr(store_module, "_write_group", racing)


def test_a_store_placed_by_another_process_meanwhile_is_kept(
    digits, synthetic, tmp_path, monkeypatch
):
    out = tmp_path / "s.zarr"
    _another_writer_meanwhile(monkeypatch, digits, out)

    with pytest.raises(ValueError, match="already exists; pass --force"):
        write_store(synthetic, PartitionSpec(num_shards=3), out, force=False)

    assert open_store(out).source == "digits"  # not swapped under the other process's run
    assert [p.name for p in tmp_path.iterdir()] == ["s.zarr"]


def test_the_default_store_written_meanwhile_by_another_run_is_used(digits, tmp_path, monkeypatch):
    from dask_dane.pipeline.setup.run_setup import prepare_store

    out = tmp_path / "digits.zarr"
    _another_writer_meanwhile(monkeypatch, digits, out)

    assert prepare_store("digits", out, shards=2) == out
    assert open_store(out).num_shards == 2
    assert [p.name for p in tmp_path.iterdir()] == ["digits.zarr"]
