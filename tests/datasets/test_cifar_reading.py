"""The cifar10:DIR and cifar100:DIR sources: small batches in the real key layout read back
exactly, their class names in the store and in `dane info`."""

from __future__ import annotations

from pathlib import Path

import cifar_batches
import numpy as np
import pytest
import zarr

from dask_dane.datasets.sources import SourceOptions, load_source

HERE = Path(__file__).resolve().parents[1]  # tests/


ROWS, CIFAR10_NAMES = cifar_batches.ROWS, cifar_batches.CIFAR10_NAMES
_cifar10, _cifar100 = cifar_batches._cifar10, cifar_batches._cifar100


def _images(batch: dict) -> np.ndarray:
    return batch[b"data"].reshape(-1, 3, 32, 32)


# --- reading -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar10_batches_read_back_exactly_in_file_order(tmp_path, protocol):
    batches = _cifar10(tmp_path, protocol)

    raw = load_source(f"cifar10:{tmp_path}", SourceOptions())

    train = [batches[f"data_batch_{i}"] for i in range(1, 6)]
    np.testing.assert_array_equal(raw.x_train, np.concatenate([_images(b) for b in train]))
    np.testing.assert_array_equal(raw.y_train, np.concatenate([b[b"labels"] for b in train]))
    np.testing.assert_array_equal(raw.x_test, _images(batches["test_batch"]))
    np.testing.assert_array_equal(raw.y_test, batches["test_batch"][b"labels"])
    assert raw.x_train.shape == (5 * ROWS, 3, 32, 32) and raw.x_train.dtype == np.uint8
    assert raw.y_train.dtype == np.int64
    assert raw.num_classes == 10 and raw.source == "cifar10"
    assert raw.attrs == {"class_names": CIFAR10_NAMES}


def test_a_row_is_1024_red_then_green_then_blue_values_row_by_row(tmp_path):
    batches = _cifar10(tmp_path)
    row = batches["test_batch"][b"data"][3]

    raw = load_source(f"cifar10:{tmp_path}", SourceOptions())

    image = raw.x_test[3]
    assert image[0, 0, 0] == row[0] and image[0, 0, 1] == row[1] and image[0, 1, 0] == row[32]
    assert image[1, 0, 0] == row[1024] and image[2, 31, 31] == row[3071]


def test_the_archive_folder_inside_dir_is_found(tmp_path):
    batches = _cifar10(tmp_path / "cifar-10-batches-py")

    raw = load_source("cifar10", SourceOptions(path=str(tmp_path)))

    np.testing.assert_array_equal(raw.x_test, _images(batches["test_batch"]))


def test_cifar100_takes_the_fine_labels_and_their_names(tmp_path):
    batches = _cifar100(tmp_path / "cifar-100-python")

    raw = load_source(f"cifar100:{tmp_path}", SourceOptions())

    np.testing.assert_array_equal(raw.x_train, _images(batches["train"]))
    np.testing.assert_array_equal(raw.y_train, batches["train"][b"fine_labels"])
    np.testing.assert_array_equal(raw.y_test, batches["test"][b"fine_labels"])
    assert raw.y_train.tolist() != batches["train"][b"coarse_labels"]
    assert raw.num_classes == 100 and raw.source == "cifar100"
    assert raw.attrs["class_names"] == [f"fine{i}" for i in range(100)]


def test_prepare_stores_cifar_class_names_and_info_prints_them(tmp_path, capfd, run_cli):
    _cifar10(tmp_path / "cifar")
    store = tmp_path / "c.zarr"

    prepared = run_cli(["prepare", f"cifar10:{tmp_path / 'cifar'}", "--out", str(store)])
    shown = run_cli(["info", str(store)])
    captured = capfd.readouterr()

    assert prepared == 0 and shown == 0, captured.err
    assert zarr.open_group(store, mode="r").attrs["class_names"] == CIFAR10_NAMES
    assert f"class names:    {', '.join(CIFAR10_NAMES)}\n" in captured.out
    assert "wrote " in captured.out and "100 train / 20 test" in captured.out
