"""Opening a zarr store: clear errors on bad stores (missing, not zarr, not ours, another
format version, gapped shards), a deleted chunk named with its rows and shards, metadata
edited after writing refused by its digest, and a store path that every worker can see."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import store_datasets
import zarr

from dask_dane.datasets.integrity import DIGEST_KEY, metadata_digest
from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import FORMAT_VERSION, open_store, read_shard, write_store
from dask_dane.datasets.store import write as store_module

HERE = Path(__file__).resolve().parents[1]  # tests/


# Fixtures: bound in this module so that pytest finds them for its tests.
digits, synthetic = store_datasets.digits, store_datasets.synthetic


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
    from dask_dane.pipeline.engine.round import tasks
    from dask_dane.pipeline.engine.round.shards import load_shard

    missing = str(tmp_path / "elsewhere.zarr")
    with pytest.raises(ValueError) as raised:
        load_shard(
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
