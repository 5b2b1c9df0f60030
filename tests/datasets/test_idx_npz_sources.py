"""Sources read from IDX and .npz files: the IDX reader, idx:DIR, Fashion-MNIST and npz:FILE."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from dask_dane.datasets.idx import IDX_STEMS, read_idx
from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import FASHION_MNIST_DIR, RawDataset, SourceOptions, load_source
from dask_dane.datasets.store import write_store

TYPE_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D}


def write_idx(path: Path, array: np.ndarray, *, gz: bool = False) -> Path:
    """An IDX file written by hand from the format description (independent of the reader)."""
    header = bytes([0, 0, TYPE_CODES[array.dtype], array.ndim])
    header += struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_mnist_dir(root: Path, *, num_train: int = 30, num_test: int = 10, gz: bool) -> dict:
    """An MNIST-format directory of random 6x5 images with labels 0..3 (three classes used)."""
    rng = np.random.default_rng(0)
    arrays = {
        "train_images": rng.integers(0, 256, (num_train, 6, 5), dtype=np.uint8),
        "train_labels": (np.arange(num_train) % 4).astype(np.uint8),
        "test_images": rng.integers(0, 256, (num_test, 6, 5), dtype=np.uint8),
        "test_labels": (np.arange(num_test) % 4).astype(np.uint8),
    }
    root.mkdir(parents=True, exist_ok=True)
    for part, stem in IDX_STEMS.items():
        write_idx(root / (stem + (".gz" if gz else "")), arrays[part], gz=gz)
    return arrays


# --- the IDX reader ---------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32])
def test_read_idx_round_trips_values_shape_and_byte_order(tmp_path, gz, dtype):
    # Values above 255 in the wider types catch a reader that ignores big-endian order.
    expected = (np.arange(2 * 3 * 4).reshape(2, 3, 4) * (1 if dtype == np.uint8 else 1001)).astype(
        dtype
    )
    path = write_idx(tmp_path / "a-idx3-ubyte", expected, gz=gz)

    values = read_idx(path)

    assert values.dtype == np.dtype(dtype) and values.dtype.isnative
    np.testing.assert_array_equal(values, expected)


def _valid_bytes() -> bytes:
    return bytes([0, 0, 0x08, 2]) + struct.pack(">2I", 2, 3) + bytes(range(6))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x08\x03" + _valid_bytes()[2:], "bad magic number"),  # nonzero leading bytes
        (bytes([0, 0, 0x07, 2]) + _valid_bytes()[4:], "bad magic number"),  # unknown type code
        (b"\x00\x00", "bad magic number"),  # shorter than a magic number
        (bytes([0, 0, 0x08, 3]) + struct.pack(">2I", 2, 3), "truncated header"),
        (_valid_bytes()[:-1], "holds 5 bytes"),  # one value missing
        (_valid_bytes() + b"\x00", "holds 7 bytes"),  # one value too many
        (gzip.compress(_valid_bytes())[:-6], "not a valid gzip file"),  # cut-off download
    ],
    ids=["magic", "type-code", "short", "header", "truncated", "extra", "bad-gzip"],
)
def test_read_idx_rejects_malformed_files_naming_the_file(tmp_path, content, message):
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(content)

    with pytest.raises(ValueError, match=message) as err:
        read_idx(path)

    assert str(path) in str(err.value)


def test_read_idx_missing_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_idx(tmp_path / "nothing-here")


# --- idx:DIR and fashion-mnist -----------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_idx_source_keeps_the_files_split_and_adds_a_channel_axis(tmp_path, gz):
    arrays = write_mnist_dir(tmp_path / "mnist", gz=gz)

    raw = load_source(f"idx:{tmp_path / 'mnist'}", SourceOptions())

    assert raw.x_train.shape == (30, 1, 6, 5) and raw.x_train.dtype == np.uint8
    assert raw.x_test.shape == (10, 1, 6, 5)
    np.testing.assert_array_equal(raw.x_train[:, 0], arrays["train_images"])
    np.testing.assert_array_equal(raw.y_test, arrays["test_labels"])
    assert raw.y_train.dtype == np.int64
    assert raw.task == "classification" and raw.num_classes == 4
    # The same directory through --path gives the same data.
    same = load_source("idx", SourceOptions(path=str(tmp_path / "mnist")))
    np.testing.assert_array_equal(same.x_test, raw.x_test)


def test_idx_source_errors_name_the_missing_file_and_mismatched_labels(tmp_path):
    write_mnist_dir(tmp_path / "d", gz=True)
    (tmp_path / "d" / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(ValueError, match="no t10k-labels-idx1-ubyte"):
        load_source(f"idx:{tmp_path / 'd'}", SourceOptions())

    write_idx(tmp_path / "d" / "t10k-labels-idx1-ubyte", np.zeros(9, np.uint8))  # 9 != 10
    with pytest.raises(ValueError, match=r"\(9,\) for 10 images"):
        load_source(f"idx:{tmp_path / 'd'}", SourceOptions())

    with pytest.raises(ValueError, match="not a directory"):
        load_source(f"idx:{tmp_path / 'absent'}", SourceOptions())
    with pytest.raises(ValueError, match="--path gives another"):
        load_source(f"idx:{tmp_path / 'd'}", SourceOptions(path=str(tmp_path)))


def test_unknown_source_lists_the_path_forms():
    with pytest.raises(ValueError, match=r"idx:PATH, npz:PATH"):
        load_source("csv:data.csv", SourceOptions())


def test_fashion_mnist_missing_directory_says_how_to_install(tmp_path):
    with pytest.raises(ValueError, match="apt-get install dataset-fashion-mnist"):
        load_source("fashion-mnist", SourceOptions(path=str(tmp_path / "absent")))


@pytest.mark.skipif(
    not Path(FASHION_MNIST_DIR).is_dir(),
    reason=f"{FASHION_MNIST_DIR} absent: `apt-get install dataset-fashion-mnist` (.ci/run does)",
)
def test_fashion_mnist_official_split_and_a_store_of_a_few_thousand(tmp_path):
    raw = load_source("fashion-mnist", SourceOptions())

    assert raw.x_train.shape == (60000, 1, 28, 28) and raw.x_train.dtype == np.uint8
    assert raw.x_test.shape == (10000, 1, 28, 28)
    # The official split is balanced: 6000 and 1000 images of each of the 10 classes.
    assert np.bincount(raw.y_train).tolist() == [6000] * 10
    assert np.bincount(raw.y_test).tolist() == [1000] * 10
    few = RawDataset(
        source=raw.source,
        task=raw.task,
        num_classes=raw.num_classes,
        x_train=raw.x_train[:3000],
        y_train=raw.y_train[:3000],
        x_test=raw.x_test[:500],
        y_test=raw.y_test[:500],
    )
    info = write_store(few, PartitionSpec(num_shards=3), tmp_path / "fm.zarr", force=False)
    assert info.sample_shape == (1, 28, 28) and info.x_dtype == "uint8"
    # Fashion-MNIST's pixel mean is about 0.286 of full scale and its std about 0.353.
    assert info.normalization["mean"][0] / 255 == pytest.approx(0.286, abs=0.01)
    assert info.normalization["std"][0] / 255 == pytest.approx(0.353, abs=0.01)


# --- npz:FILE ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x_shape", "stored_shape"),
    [((12, 5, 6), (1, 5, 6)), ((12, 3, 5, 6), (3, 5, 6)), ((12, 7), (7,))],
    ids=["grey-images", "colour-images", "tabular"],
)
def test_npz_source_reads_images_and_tabular_rows(tmp_path, x_shape, stored_shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=x_shape).astype(np.float32)
    y = np.arange(12) % 3
    np.savez(tmp_path / "d.npz", x_train=x[:8], y_train=y[:8], x_test=x[8:], y_test=y[8:])

    raw = load_source(f"npz:{tmp_path / 'd.npz'}", SourceOptions())

    assert raw.x_train.shape == (8, *stored_shape) and raw.x_test.shape == (4, *stored_shape)
    np.testing.assert_array_equal(np.asarray(raw.x_train).reshape(8, -1), x[:8].reshape(8, -1))
    assert raw.task == "classification" and raw.num_classes == 3


def test_npz_float_targets_make_a_regression_store(tmp_path):
    x = np.ones((6, 4), np.float64)
    np.savez(tmp_path / "r.npz", x_train=x, y_train=np.linspace(0, 1, 6), x_test=x, y_test=x[:, 0])

    raw = load_source("npz", SourceOptions(path=str(tmp_path / "r.npz")))

    assert raw.task == "regression" and raw.num_classes == 1
    assert raw.y_train.dtype == np.float32


def test_npz_errors_name_the_file_and_the_missing_arrays(tmp_path):
    np.savez(tmp_path / "part.npz", x_train=np.zeros((2, 3)), y_train=np.zeros(2, int))
    with pytest.raises(ValueError, match=r"part\.npz lacks array\(s\) x_test, y_test"):
        load_source(f"npz:{tmp_path / 'part.npz'}", SourceOptions())

    (tmp_path / "junk.npz").write_bytes(b"not a zip archive")
    with pytest.raises(ValueError, match=r"junk\.npz is not a readable \.npz"):
        load_source(f"npz:{tmp_path / 'junk.npz'}", SourceOptions())

    with pytest.raises(ValueError, match="does not exist"):
        load_source(f"npz:{tmp_path / 'absent.npz'}", SourceOptions())
