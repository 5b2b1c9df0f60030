"""Stores written a chunk at a time from lazily read rows: the same bytes as the in-memory path.

The digests below are of stores written by the path that held every array in memory (commit
7ce0f62, before rows were streamed; `dane prepare` with the same options there); a change to
generation, decoding, partition, normalization or chunking that alters a single byte of a
store fails here.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr

from dask_dane.datasets.lazy import LazyRows, ScratchRows
from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write as store_module
from dask_dane.datasets.store import write_store

ARRAYS = ("train/x", "train/y", "test/x", "test/y")


def _store_sha(root: Path) -> str:
    """SHA-256 over every file of a store: its path and its bytes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("source", "options", "spec", "expected"),
    [
        (
            "synthetic",
            SourceOptions(samples=300),
            PartitionSpec(num_shards=3),
            "5309d6f04b959efeb163fc1bc22d3f3aee15d0752512e4390c93f8d800507fdd",
        ),
        (
            "synthetic",
            SourceOptions(samples=5000, image_size=12, seed=3),
            PartitionSpec(kind="dirichlet", num_shards=4, seed=3),
            "1eed9280dd527875ed53db014d5e08fe0ed0fcc51e9ddb5f143abaa0731087be",
        ),
        (  # 32001 train rows of 1 KiB: 8 chunks of train/x, gathered through the permutation
            "synthetic",
            SourceOptions(samples=40000, image_size=16, seed=1),
            PartitionSpec(kind="label-skew", num_shards=5, seed=1),
            "9282b43ab232daa8ae8f6c02e3d1c78d91413090eadc862fb38892b8da72594d",
        ),
        (
            "digits",
            SourceOptions(),
            PartitionSpec(num_shards=2),
            "73cf310d8f80878335facb463accb6f4b1a2bd1a25ff2ef58af729bd7c8bcf25",
        ),
    ],
)
def test_store_bytes_match_those_the_in_memory_path_wrote(
    source, options, spec, expected, tmp_path
):
    out = tmp_path / "s.zarr"
    write_store(load_source(source, options), spec, out, force=False)
    assert _store_sha(out) == expected


def _image_tree(root: Path, *, split: bool) -> Path:
    """3 classes of 14 images (5 a class in test/): grey and RGB mixed, 10x12, and one file
    Pillow cannot read in class b."""
    from PIL import Image

    rng = np.random.default_rng(7)
    parts = ("train", "test") if split else ("",)
    for part in parts:
        for label, name in enumerate("abc"):
            folder = root / part / name
            folder.mkdir(parents=True)
            for i in range(14 if part != "test" else 5):
                pixels = rng.integers(0, 256, size=(10, 12, 3), dtype=np.uint8) // (label + 1)
                image = Image.fromarray(pixels)
                (image.convert("L") if i % 3 == 0 else image).save(folder / f"{i:02d}.png")
    (root / parts[0] / "b" / "zz.png").write_bytes(b"not an image")
    return root


@pytest.mark.parametrize(
    ("split", "options", "spec", "expected"),
    [
        (  # grey widened to RGB, the bad file skipped, split by --test-fraction
            False,
            SourceOptions(skip_bad=True),
            PartitionSpec(num_shards=3),
            "649013cba25ea9c639f02e888639d32a22f9a156cf5d88bd029e774c247ae479",
        ),
        (
            False,
            SourceOptions(skip_bad=True, resize=(6, 5), channels=1, seed=4),
            PartitionSpec(kind="dirichlet", num_shards=2, seed=4),
            "8bbc4fc0b3a6715582e1dc22649fca261861b43a72b8909a3612c32ee10a5174",
        ),
        (  # train/ and test/ folders
            True,
            SourceOptions(skip_bad=True),
            PartitionSpec(kind="label-skew", num_shards=2),
            "f0d09a1bb1dbee0292e6fe63f7687c82aa62f5197cd5c7cac9da27cc73b8c0b8",
        ),
    ],
)
def test_image_stores_match_those_the_in_memory_path_wrote(
    split, options, spec, expected, tmp_path
):
    root = _image_tree(tmp_path / ("split" if split else "flat"), split=split)  # source names it
    raw = load_source(f"images:{root}", options)
    assert isinstance(raw.x_train, LazyRows) and raw.attrs["skipped_files"] == 1
    write_store(raw, spec, tmp_path / "s.zarr", force=False)
    assert _store_sha(tmp_path / "s.zarr") == expected


def _archives(folder: Path) -> dict[str, Path]:
    """Grey uint8 images (compressed), int16 colour images in Fortran order, float64 rows
    with float targets, and 40000 uint8 16x16 images over several chunks."""
    rng = np.random.default_rng(11)
    folder.mkdir()
    grey = rng.integers(0, 256, size=(300, 9, 7), dtype=np.uint8)
    labels = rng.integers(0, 4, size=300)
    colour = np.asfortranarray(rng.integers(-500, 500, size=(120, 3, 5, 4), dtype=np.int16))
    rows = rng.normal(size=(500, 6))
    big = rng.integers(0, 256, size=(40000, 16, 16), dtype=np.uint8)
    splits = {
        "grey": (grey[:240], labels[:240], grey[240:], labels[240:]),
        "fortran": (
            np.asfortranarray(colour[:100]), np.arange(100) % 3,
            np.asfortranarray(colour[100:]), np.arange(20) % 3,
        ),
        "rows": (rows[:400], rows[:400, 0] * 2, rows[400:], rows[400:, 1]),
        "big": (big[:36000], np.arange(36000) % 10, big[36000:], np.arange(4000) % 10),
    }  # fmt: skip
    for name, (x_train, y_train, x_test, y_test) in splits.items():
        save = np.savez_compressed if name == "grey" else np.savez
        save(folder / f"{name}.npz", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return {name: folder / f"{name}.npz" for name in splits}


@pytest.mark.parametrize(
    ("archive", "spec", "expected"),
    [
        (
            "grey",
            PartitionSpec(num_shards=3),
            "011c97ff8744a929a7793576bcc32925ba43d0d64e550add9b1497b9eba49e8f",
        ),
        # The in-memory path gave 8c9d9490...: the same arrays, but one channel's std 2e-15
        # apart, as it summed Fortran-ordered memory in another order. This is the store of
        # the same data saved in C order, which both paths write.
        (
            "fortran",
            PartitionSpec(kind="dirichlet", num_shards=2, seed=2),
            "a7dff9df4a1f68c15ff76ae436994f005475b9b388647de1469eb3e86db60de4",
        ),
        (
            "rows",
            PartitionSpec(num_shards=2),
            "7ece35b59168ecf54e7bdd3342f92003757a1fc92460830366074a9357063066",
        ),
        (
            "big",
            PartitionSpec(num_shards=4, seed=5),
            "255cb0950732f118a775281c6d3c8b2768937820da7a3706a7366689b680e293",
        ),
    ],
)
def test_npz_stores_match_those_the_in_memory_path_wrote(archive, spec, expected, tmp_path):
    path = _archives(tmp_path / "archives")[archive]
    raw = load_source(f"npz:{path}", SourceOptions())
    assert isinstance(raw.x_train, LazyRows)
    write_store(raw, spec, tmp_path / f"{archive}.zarr", force=False)
    assert _store_sha(tmp_path / f"{archive}.zarr") == expected


def test_lazy_rows_write_the_same_store_as_their_arrays_across_many_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "CHUNK_BYTES", 256 * 37)  # 37 rows a chunk: many chunks
    raw = load_source("synthetic", SourceOptions(samples=900, seed=5))
    assert isinstance(raw.x_train, LazyRows)
    eager = replace(raw, x_train=np.asarray(raw.x_train), x_test=np.asarray(raw.x_test))
    spec = PartitionSpec(kind="dirichlet", num_shards=3, seed=5)
    lazy_out = write_store(raw, spec, tmp_path / "lazy.zarr", force=False).path
    eager_out = write_store(eager, spec, tmp_path / "eager.zarr", force=False).path
    lazy, eager_group = zarr.open_group(lazy_out, mode="r"), zarr.open_group(eager_out, mode="r")
    assert lazy["train/x"].chunks[0] == 37
    for name in ARRAYS:
        np.testing.assert_array_equal(lazy[name][...], eager_group[name][...])
    assert dict(lazy.attrs) == dict(eager_group.attrs)


def test_streamed_normalization_matches_numpy_on_the_whole_train_split(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "CHUNK_BYTES", 256 * 50)  # sums over many blocks
    raw = load_source("synthetic", SourceOptions(samples=2000, seed=2))
    info = write_store(raw, PartitionSpec(num_shards=2), tmp_path / "s.zarr", force=False)
    x = np.asarray(raw.x_train, dtype=np.float64)
    norm = zarr.open_group(info.path, mode="r").attrs["normalization"]
    np.testing.assert_allclose(norm["mean"], x.mean(axis=(0, 2, 3)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(norm["std"], x.std(axis=(0, 2, 3)), rtol=1e-10)


def test_scratch_rows_gather_any_order_with_repeats():
    scratch = ScratchRows((2, 3), np.float32)
    data = np.arange(10 * 6, dtype=np.float32).reshape(10, 2, 3)
    scratch.append(data[:4])
    scratch.append(data[4:])
    rows = scratch.rows()
    picks = np.array([7, 2, 3, 4, 9, 2, 0])  # a run (2, 3, 4), a repeat, out of order
    np.testing.assert_array_equal(rows[picks], data[picks])
    np.testing.assert_array_equal(rows[3:8], data[3:8])
    np.testing.assert_array_equal(rows.subset(picks)[1:3], data[[2, 3]])
    assert rows.shape == (10, 2, 3) and rows.size == 60 and rows[5].shape == (2, 3)


def test_nan_in_lazy_rows_is_refused_naming_its_row(tmp_path):
    scratch = ScratchRows((3,), np.float32)
    block = np.zeros((6, 3), dtype=np.float32)
    block[4, 1] = np.nan
    scratch.append(block)
    raw = replace(
        load_source("synthetic", SourceOptions(samples=40)),
        x_train=scratch.rows(),
        y_train=np.zeros(6, dtype=np.int64),
        x_test=np.zeros((2, 3), dtype=np.float32),
        y_test=np.zeros(2, dtype=np.int64),
    )
    with pytest.raises(ValueError, match=r"1 train sample\(s\) contain NaN .*first at row 4"):
        write_store(raw, PartitionSpec(num_shards=2), tmp_path / "s.zarr", force=False)
    assert not (tmp_path / "s.zarr").exists()


def test_npz_with_pickled_x_is_refused_before_anything_is_read(tmp_path):
    path = tmp_path / "pickled.npz"
    labels = np.zeros(2, dtype=np.int64)
    x = np.array([[1, "a"], [2, "b"]], dtype=object)
    np.savez(path, x_train=x, y_train=labels, x_test=x, y_test=labels)
    with pytest.raises(ValueError, match=r"pickled\.npz is not a readable \.npz file \(Object"):
        load_source(f"npz:{path}", SourceOptions())
