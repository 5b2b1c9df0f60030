"""The cifar10:DIR and cifar100:DIR sources: small batches in the real key layout read back
exactly; malicious pickles refused without running; every bad folder a one-line exit 2."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import zarr

from dask_dane.datasets.cifar import load_pickle
from dask_dane.datasets.sources import SourceOptions, load_source

ROWS = 20  # images per batch
CIFAR10_NAMES = [
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
]  # fmt: skip


def _dump(path: Path, obj, protocol: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=protocol))


def _batch(rng: np.random.Generator, label_key: bytes, num_classes: int) -> dict:
    """One batch with the keys of the real files (Python 2 str keys read back as bytes)."""
    batch = {
        b"batch_label": b"training batch",
        b"data": rng.integers(0, 256, size=(ROWS, 3072), dtype=np.uint8),
        label_key: rng.integers(0, num_classes, size=ROWS).tolist(),
        b"filenames": [f"img{i}.png".encode() for i in range(ROWS)],
    }
    if label_key == b"fine_labels":
        batch[b"coarse_labels"] = rng.integers(0, 20, size=ROWS).tolist()
    return batch


def _cifar10(folder: Path, protocol: int = 2) -> dict[str, dict]:
    """The seven CIFAR-10 files in `folder`; returns the batches by file name."""
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {name: _batch(rng, b"labels", 10) for name in names}
    for name, batch in batches.items():
        _dump(folder / name, batch, protocol)
    meta = {b"label_names": [n.encode() for n in CIFAR10_NAMES], b"num_cases_per_batch": ROWS}
    _dump(folder / "batches.meta", meta, protocol)
    return batches


def _cifar100(folder: Path) -> dict[str, dict]:
    rng = np.random.default_rng(1)
    batches = {name: _batch(rng, b"fine_labels", 100) for name in ("train", "test")}
    for name, batch in batches.items():
        _dump(folder / name, batch)
    fine = [f"fine{i}".encode() for i in range(100)]
    _dump(folder / "meta", {b"fine_label_names": fine, b"coarse_label_names": [b"c"] * 20})
    return batches


def _images(batch: dict) -> np.ndarray:
    return batch[b"data"].reshape(-1, 3, 32, 32)


class RunsShell:
    """A pickle that, loaded by a plain pickle.load, runs a shell command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class Evaluates:
    def __reduce__(self):
        return (eval, ("__import__('os').system('true')",))


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


# --- the restricted unpickler --------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_the_unpickler_builds_dicts_lists_bytes_and_arrays(tmp_path, protocol):
    value = {b"a": [1, 2.5, b"x", "y"], b"b": np.arange(6, dtype=np.uint8).reshape(2, 3)}
    _dump(tmp_path / "p", value, protocol)

    loaded = load_pickle(tmp_path / "p")

    assert loaded[b"a"] == [1, 2.5, b"x", "y"]
    np.testing.assert_array_equal(loaded[b"b"], value[b"b"])


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_pickle_that_would_run_a_shell_command_is_refused_unrun(tmp_path, protocol):
    marker = tmp_path / "ran"
    _cifar10(tmp_path)
    batch = _batch(np.random.default_rng(0), b"labels", 10)
    batch[b"data"] = RunsShell(f"touch {marker}")
    _dump(tmp_path / "data_batch_2", batch, protocol)

    with pytest.raises(ValueError, match=r"data_batch_2 is not a CIFAR batch.*system.*refused"):
        load_source(f"cifar10:{tmp_path}", SourceOptions())

    assert not marker.exists()
    pickle.loads((tmp_path / "data_batch_2").read_bytes())  # the same file, loaded unguarded,
    assert marker.exists()  # runs the command: so the refusal above is what stopped it


def test_a_pickle_that_calls_eval_is_refused(tmp_path):
    _dump(tmp_path / "p", {b"data": Evaluates()})

    with pytest.raises(ValueError, match=r"calls (__builtin__|builtins)\.eval"):
        load_pickle(tmp_path / "p")


def test_codecs_encode_is_allowed_for_latin1_only(tmp_path):
    import _codecs

    class Rot13:
        def __reduce__(self):
            return (_codecs.encode, ("abc", "rot13"))

    _dump(tmp_path / "p", Rot13())

    with pytest.raises(ValueError, match="refused"):
        load_pickle(tmp_path / "p")


# --- bad folders: exit 2, one line, nothing written ----------------------------------------


def _replace_batch(root: Path, name: str, **changes) -> None:
    batch = _batch(np.random.default_rng(5), b"labels", 10)
    batch.update({k.encode(): v for k, v in changes.items()})
    _dump(root / name, batch)


def _without(root: Path, key: bytes) -> None:
    batch = _batch(np.random.default_rng(5), b"labels", 10)
    del batch[key]
    _dump(root / "data_batch_1", batch)


BAD_FOLDERS = {
    "missing-dir": (lambda root: None, "cifar10", ["tree does not exist"]),
    "missing-files": (
        lambda root: (
            _cifar10(root),
            (root / "data_batch_3").unlink(),
            (root / "test_batch").unlink(),
        ),
        "cifar10",
        ["lacks data_batch_3, test_batch"],
    ),
    "cifar100-as-cifar10": (
        lambda root: _cifar100(root / "cifar-100-python"),
        "cifar10",
        ["holds CIFAR-100's batches", "cifar100:"],
    ),
    "cifar10-as-cifar100": (lambda root: _cifar10(root), "cifar100", ["use `cifar10:"]),
    "wrong-row-length": (
        lambda root: (
            _cifar10(root),
            _replace_batch(root, "data_batch_4", data=np.zeros((20, 100), np.uint8)),
        ),
        "cifar10",
        ["data_batch_4: b'data' is uint8 of shape (20, 100)", "(N, 3072)"],
    ),
    "float-data": (
        lambda root: (
            _cifar10(root),
            _replace_batch(root, "test_batch", data=np.zeros((20, 3072))),
        ),
        "cifar10",
        ["test_batch: b'data' is float64"],
    ),
    "labels-too-few": (
        lambda root: (_cifar10(root), _replace_batch(root, "data_batch_1", labels=[0] * 19)),
        "cifar10",
        ["data_batch_1: b'labels' has shape (19,)"],
    ),
    "label-out-of-range": (
        lambda root: (_cifar10(root), _replace_batch(root, "data_batch_5", labels=[10] * 20)),
        "cifar10",
        ["data_batch_5: labels range over [10, 10]"],
    ),
    "missing-key": (
        lambda root: (_cifar10(root), _without(root, b"labels")),
        "cifar10",
        ["data_batch_1 lacks key(s) b'labels'"],
    ),
    "not-a-dict": (
        lambda root: (_cifar10(root), _dump(root / "data_batch_2", [1, 2])),
        "cifar10",
        ["data_batch_2 is not a CIFAR batch (it holds a list"],
    ),
    "not-a-pickle": (
        lambda root: (_cifar10(root), (root / "test_batch").write_bytes(b"PK\x03\x04 zip?")),
        "cifar10",
        ["test_batch cannot be read as a pickle"],
    ),
    "truncated": (
        lambda root: (
            _cifar10(root),
            (root / "data_batch_1").write_bytes((root / "data_batch_1").read_bytes()[:500]),
        ),
        "cifar10",
        ["data_batch_1 cannot be read as a pickle"],
    ),
    "bad-meta": (
        lambda root: (_cifar10(root), _dump(root / "batches.meta", {b"label_names": [b"a"]})),
        "cifar10",
        ["batches.meta does not hold 10 class names under b'label_names'"],
    ),
    "malicious": (
        lambda root: (_cifar10(root), _dump(root / "batches.meta", RunsShell(f"touch {root}/ran"))),
        "cifar10",
        ["batches.meta is not a CIFAR batch", "refused"],
    ),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_a_bad_cifar_folder_exits_2_with_one_line_and_writes_nothing(
    case, tmp_path, capfd, run_cli, assert_one_line_error
):
    make, source, fragments = BAD_FOLDERS[case]
    make(tmp_path / "tree")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "out" / "c.zarr"
    capfd.readouterr()

    status = run_cli(["prepare", f"{source}:{tmp_path / 'tree'}", "--out", str(out)])

    assert_one_line_error(status, capfd, fragments)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no "ran"
