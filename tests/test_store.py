"""The zarr store: round trip of data and attributes, atomic writes, clear errors on bad stores."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import zarr

from dask_dane.datasets.integrity import DIGEST_KEY, metadata_digest
from dask_dane.datasets.partition import PartitionSpec, partition_rows
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import (
    FORMAT_VERSION,
    label_histograms,
    open_store,
    read_rows,
    read_shard,
    write_store,
)
from dask_dane.datasets.store import write as store_module


@pytest.fixture(scope="module")
def digits():
    return load_source("digits", SourceOptions(seed=0))


@pytest.fixture(scope="module")
def synthetic():
    return load_source("synthetic", SourceOptions(seed=3, samples=300, image_size=12))


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


def test_open_missing_path_says_how_to_create_a_store(tmp_path):
    with pytest.raises(ValueError, match=r"does not exist.*dane prepare"):
        open_store(tmp_path / "nothing.zarr")


def test_open_plain_folder_says_it_is_not_a_zarr_store(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")

    with pytest.raises(ValueError, match=r"not a zarr v3 store.*dane prepare"):
        open_store(tmp_path)


def test_open_plain_file_says_it_is_not_a_zarr_store(tmp_path):
    path = tmp_path / "data.npz"
    path.write_bytes(b"not zarr")

    with pytest.raises(ValueError, match="not a zarr v3 store"):
        open_store(path)


def test_open_zarr_group_without_attributes_says_to_recreate_it(tmp_path):
    path = tmp_path / "other.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("weights", shape=(3,), dtype="f4")

    with pytest.raises(ValueError, match=r"format_version.*dane prepare"):
        open_store(path)


def test_open_zarr_group_without_our_arrays_names_what_is_missing(tmp_path):
    path = tmp_path / "other.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.attrs.update({"format_version": FORMAT_VERSION, "source": "x", "shards": [[0, 1]]})

    with pytest.raises(ValueError, match=r"not in the dask-dane layout.*train/x"):
        open_store(path)


def test_open_wrong_format_version_names_both_versions(synthetic, tmp_path):
    path = tmp_path / "s.zarr"
    write_store(synthetic, PartitionSpec(num_shards=2), path, force=False)
    zarr.open_group(path, mode="r+", zarr_format=3).attrs["format_version"] = 99

    with pytest.raises(ValueError, match=rf"format_version 99.*reads {FORMAT_VERSION}.*--force"):
        open_store(path)


def test_open_store_with_gapped_shard_ranges_is_inconsistent(synthetic, tmp_path):
    path = tmp_path / "s.zarr"
    info = write_store(synthetic, PartitionSpec(num_shards=2), path, force=False)
    (_, middle), (_, end) = info.shards
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    group.attrs["shards"] = [[0, middle - 1], [middle, end]]
    # Signed as if written so: the content check behind the digest is what is tested.
    group.attrs[DIGEST_KEY] = metadata_digest(group, dict(group.attrs))

    with pytest.raises(ValueError, match="not contiguous"):
        open_store(path)


def test_store_attributes_are_plain_json(synthetic, tmp_path):
    path = tmp_path / "s.zarr"
    write_store(synthetic, PartitionSpec(kind="iid", num_shards=2, seed=4), path, force=False)

    metadata = json.loads((path / "zarr.json").read_text())

    assert metadata["zarr_format"] == 3
    assert metadata["attributes"]["shards"] == [list(s) for s in open_store(path).shards]
    assert metadata["attributes"]["partition"] == {"kind": "iid", "seed": 4}


# --- A chunk file deleted: zarr would read it as zeros, with no error ---------------------


@pytest.fixture
def chunked_digits(digits, tmp_path, monkeypatch):
    """Digits in 4 iid shards, 100 images (64 bytes each) a chunk: shards span several chunks."""
    monkeypatch.setattr(store_module, "CHUNK_BYTES", 64 * 100)
    info = write_store(
        digits, PartitionSpec(num_shards=4, seed=0), tmp_path / "s.zarr", force=False
    )
    assert zarr.open_group(info.path, mode="r")["train/x"].chunks[0] == 100
    return info


def _shard_args(info, index: int) -> dict:
    start, stop = info.shards[index]
    return dict(
        path=info.path,
        split="train",
        start=start,
        stop=stop,
        index=index,
        task=info.task,
        num_classes=info.num_classes,
    )


def test_read_shard_names_the_shard_whose_chunk_file_was_deleted(chunked_digits, tmp_path):
    info = chunked_digits
    start, stop = info.shards[1]
    chunk = start // 100 + 1  # a chunk wholly inside shard 1, none of shard 0's
    assert 100 * chunk >= start and 100 * (chunk + 1) <= stop
    (tmp_path / "s.zarr" / "train" / "x" / "c" / str(chunk) / "0" / "0" / "0").unlink()

    with pytest.raises(ValueError) as raised:
        read_shard(**_shard_args(info, 1))
    x, y = read_shard(**_shard_args(info, 0))  # shard 0's chunks are all there

    message = str(raised.value)
    assert f"shard 1 (rows [{start}, {stop}))" in message
    assert f"train/x holding rows [{100 * chunk}, {100 * (chunk + 1)}) is missing" in message
    assert "dane prepare ... --force" in message
    assert "\n" not in message
    assert len(x) == len(y) == info.shards[0][1]


def test_open_store_names_the_array_rows_and_shards_of_a_deleted_chunk(chunked_digits, tmp_path):
    info = chunked_digits
    (tmp_path / "s.zarr" / "train" / "y" / "c" / "0").unlink()  # 800 labels: shards 0-2

    with pytest.raises(ValueError) as raised:
        open_store(info.path)

    assert str(raised.value) == (
        f"store {info.path} is damaged: the chunk of train/y holding rows [0, 800), shards "
        f"0, 1, 2 is missing (its file was deleted); re-create it with `dane prepare ... "
        f"--out {info.path} --force`"
    )


def test_open_store_finds_a_deleted_chunk_of_the_test_split(chunked_digits, tmp_path):
    info = chunked_digits
    last = (info.num_test - 1) // 100
    (tmp_path / "s.zarr" / "test" / "x" / "c" / str(last) / "0" / "0" / "0").unlink()

    with pytest.raises(ValueError, match=rf"test/x holding rows \[{100 * last}, {info.num_test}\)"):
        open_store(info.path)


def test_chunks_of_zeros_are_stored_so_they_do_not_read_as_missing(digits, tmp_path):
    zeros = replace(digits, y_test=np.zeros_like(digits.y_test))  # one chunk, all fill value

    info = write_store(zeros, PartitionSpec(num_shards=2), tmp_path / "s.zarr", force=False)

    assert (tmp_path / "s.zarr" / "test" / "y" / "c" / "0").is_file()
    _, y = read_shard(
        path=info.path,
        split="test",
        start=0,
        stop=info.num_test,
        index=0,
        task=info.task,
        num_classes=10,
    )
    np.testing.assert_array_equal(y, 0)


def test_a_relative_store_path_reaches_the_workers_absolute(tmp_path, monkeypatch):
    from dask_dane.pipeline.setup.config import RunConfig
    from dask_dane.pipeline.setup.run_setup import prepare_run

    raw = load_source("synthetic", SourceOptions(samples=60, image_size=4))
    write_store(raw, PartitionSpec(num_shards=2), tmp_path / "data" / "s.zarr", force=False)
    monkeypatch.chdir(tmp_path)

    setup = prepare_run(RunConfig(store="data/s.zarr", model="mlp").validate())

    # A `dask worker` started in another folder would resolve "data/s.zarr" elsewhere.
    assert setup.store.path == str(tmp_path / "data" / "s.zarr")
    assert setup.shard_args(1)["store"] == str(tmp_path / "data" / "s.zarr")


def test_a_worker_that_cannot_see_the_store_says_so_and_what_it_needs(tmp_path):
    from dask_dane.pipeline.round import tasks

    missing = str(tmp_path / "elsewhere.zarr")
    with pytest.raises(ValueError) as raised:
        tasks.load_shard(
            missing, split="train", start=0, stop=10, index=0, task="classification",
            normalization={"mean": [0.0], "std": [1.0]}, dtype="float32",
        )  # fmt: skip

    message = str(raised.value)
    assert message.startswith(f"worker {tasks.worker_id()} cannot see the store {missing}; ")
    assert "every worker shares" in message and "\n" not in message


@pytest.mark.parametrize(
    "edit",
    [
        lambda g: g.attrs.update({"normalization": {"mean": 0.0, "std": 1.0}}),
        lambda g: g.attrs.update({"shards": [[0, 100], [100, 240]]}),
        lambda g: g["train/y"].resize((200,)),  # the layout, not the attributes
    ],
    ids=["normalization", "shards", "array-shape"],
)
def test_metadata_edited_after_writing_is_refused(synthetic, tmp_path, edit):
    path = tmp_path / "s.zarr"
    write_store(synthetic, PartitionSpec(num_shards=2), path, force=False)
    edit(zarr.open_group(path, mode="r+", zarr_format=3))

    with pytest.raises(ValueError, match=r"digest mismatch.*--force"):
        open_store(path)


def test_a_store_written_before_digests_still_opens(synthetic, tmp_path):
    path = tmp_path / "s.zarr"
    info = write_store(synthetic, PartitionSpec(num_shards=2), path, force=False)
    group = zarr.open_group(path, mode="r+", zarr_format=3)
    assert len(group.attrs[DIGEST_KEY]) == 64
    del group.attrs[DIGEST_KEY]

    assert open_store(path) == info
