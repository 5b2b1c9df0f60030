"""The images:DIR source through prepare: --skip-bad, its class names in the store and in
`dane info`; every bad tree a one-line exit 2."""

from __future__ import annotations

from pathlib import Path

import image_trees
import numpy as np
import pytest
import zarr

from dask_dane.datasets.images import format_class_names
from dask_dane.datasets.sources import SourceOptions, load_source, split_train_test
from dask_dane.datasets.store import open_store

HERE = Path(__file__).resolve().parents[1]  # tests/


_grey, _write = image_trees._grey, image_trees._write
_tree, _expected = image_trees._tree, image_trees._expected


# --- skip-bad, the store's attributes and `dane info` ------------------------------------


def _bad_files(root: Path) -> None:
    """A text file and a truncated PNG among the images."""
    (root / "ant" / "notes.txt").write_text("not an image")
    good = (root / "moth" / "img0.png").read_bytes()
    (root / "moth" / "zz-truncated.png").write_bytes(good[: len(good) // 2])


def test_skip_bad_skips_unreadable_files_and_counts_them(tmp_path):
    written = _tree(tmp_path, per_class=5)
    _bad_files(tmp_path)

    raw = load_source(f"images:{tmp_path}", SourceOptions(skip_bad=True, test_fraction=0.4))

    x, y = _expected(written)
    x_train, y_train, *_ = split_train_test(x, y, test_fraction=0.4, seed=0)
    assert raw.attrs["skipped_files"] == 2
    np.testing.assert_array_equal(raw.x_train, x_train)
    np.testing.assert_array_equal(raw.y_train, y_train)


def test_prepare_records_class_names_and_info_prints_them(tmp_path, capfd, run_cli):
    _tree(tmp_path / "tree", per_class=5)
    _bad_files(tmp_path / "tree")
    store = tmp_path / "s.zarr"

    prepared = run_cli(
        ["prepare", f"images:{tmp_path / 'tree'}", "--out", str(store), "--skip-bad"]
    )
    prepare_out = capfd.readouterr()
    shown = run_cli(["info", str(store)])
    info_out = capfd.readouterr()

    assert prepared == 0, prepare_out.err
    skipped = [
        tmp_path / "tree" / "ant" / "notes.txt",
        tmp_path / "tree" / "moth" / "zz-truncated.png",
    ]
    assert (
        prepare_out.err.strip()
        == f"skipped 2 file(s) Pillow cannot read: {', '.join(map(str, skipped))}"
    )
    attrs = dict(zarr.open_group(store, mode="r").attrs)
    assert attrs["class_names"] == ["ant", "moth", "zebra"]
    assert attrs["skipped_files"] == 2
    assert open_store(store).num_classes == 3
    assert shown == 0, info_out.err
    assert "class names:    ant, moth, zebra\n" in info_out.out


def test_format_class_names_lists_twenty_then_counts():
    names = [f"c{i}" for i in range(25)]

    assert format_class_names(names[:3]) == "c0, c1, c2"
    assert format_class_names(names) == ", ".join(names[:20]) + ", ... (25 classes)"


# --- bad trees: exit 2, one line, nothing written ------------------------------------------


def _mixed_sizes(root: Path) -> None:
    _tree(root, classes=("a", "b"), per_class=2)
    _write(root / "b" / "img9.png", _grey(np.random.default_rng(0), 7, 8))


def _undecodable(root: Path) -> None:
    _tree(root, classes=("a", "b"), per_class=2)
    good = (root / "a" / "img0.png").read_bytes()
    (root / "a" / "img1.png").write_bytes(good[: len(good) // 2])


def _split_missing_class(root: Path) -> None:
    _tree(root / "train", classes=("a", "b", "c"), per_class=2)
    _tree(root / "test", classes=("a", "c"), per_class=2)


# Case: (make the tree under root/tree, extra arguments, fragments the error line contains).
BAD_TREES = {
    "missing-dir": (lambda root: None, [], ["tree does not exist", "images:DIR"]),
    "empty-dir": (lambda root: root.mkdir(), [], ["no class folders", "<class>/<image>"]),
    "empty-class": (
        lambda root: (_tree(root, classes=("a", "b")), (root / "c").mkdir()),
        [],
        ["tree/c holds no images"],
    ),
    "only-hidden-in-class": (
        lambda root: (
            _tree(root, classes=("a", "b")),
            _write(root / "c" / ".x.png", _grey(np.random.default_rng(0))),
        ),
        [],
        ["tree/c holds no images"],
    ),
    "one-class": (lambda root: _tree(root, classes=("a",)), [], ["one class folder (a)"]),
    "undecodable": (_undecodable, [], ["tree/a/img1.png cannot be decoded", "--skip-bad"]),
    "not-an-image": (
        lambda root: (_tree(root, classes=("a", "b")), (root / "b" / "x.txt").write_text("hi")),
        [],
        ["tree/b/x.txt is not an image", "--skip-bad"],
    ),
    "mixed-sizes": (
        _mixed_sizes,
        [],
        ["tree/a/img0.png is 5x6", "tree/b/img9.png is 7x8", "--image-size"],
    ),
    "class-missing-from-test": (_split_missing_class, [], ["class 'b'", "tree/test"]),
    "train-without-test": (
        lambda root: _tree(root / "train", classes=("a", "b")),
        [],
        ["has train/ but no test/"],
    ),
    "all-of-a-class-skipped": (
        lambda root: (
            _tree(root, classes=("a", "b")),
            (root / "c").mkdir(),
            (root / "c" / "x.txt").write_text(""),
        ),
        ["--skip-bad"],
        ["class 'c' has no readable images"],
    ),
    "empty-test-split": (
        lambda root: _tree(root, classes=("a", "b"), per_class=1),
        [],
        ["0 test images", "--test-fraction"],
    ),
    "channels-2": (lambda root: _tree(root), ["--channels", "2"], ["--channels must be 1"]),
    "image-size-0": (lambda root: _tree(root), ["--image-size", "0"], ["--image-size"]),
    "image-size-bad": (lambda root: _tree(root), ["--image-size", "3x"], ["--image-size"]),
}


@pytest.mark.parametrize("case", BAD_TREES)
def test_a_bad_tree_exits_2_with_one_line_and_writes_nothing(
    case, tmp_path, capfd, run_cli, assert_one_line_error
):
    make, extra, fragments = BAD_TREES[case]
    make(tmp_path / "tree")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    out = tmp_path / "out" / "s.zarr"
    capfd.readouterr()

    status = run_cli(["prepare", f"images:{tmp_path / 'tree'}", "--out", str(out), *extra])

    assert_one_line_error(status, capfd, fragments)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_synthetic_refuses_a_non_square_image_size(tmp_path, capfd, run_cli):
    status = run_cli(["prepare", "synthetic", "--image-size", "4x6", "--out", str(tmp_path / "s")])

    assert status == 2
    assert "synthetic images are square" in capfd.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_api_prepare_warns_of_skipped_files_at_its_caller(tmp_path):
    import dask_dane

    _tree(tmp_path / "tree", per_class=5)
    _bad_files(tmp_path / "tree")

    with pytest.warns(
        UserWarning, match=r"skipped 2 file\(s\) Pillow cannot read: .*notes.txt"
    ) as caught:
        dask_dane.prepare(tmp_path / "s.zarr", f"images:{tmp_path / 'tree'}", skip_bad=True)

    assert caught[0].filename == __file__
