"""The images:DIR source: an ImageFolder tree read back exactly, split, resized, converted;
its class names in the store and in `dane info`; every bad tree a one-line exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from PIL import Image

from dask_dane.datasets.images import decode_images, format_class_names, parse_image_size
from dask_dane.datasets.sources import SourceOptions, load_source, split_train_test
from dask_dane.datasets.store import open_store

RNG_SEED = 7


def _grey(rng: np.random.Generator, height: int = 5, width: int = 6) -> np.ndarray:
    return rng.integers(0, 256, size=(height, width), dtype=np.uint8)


def _write(path: Path, pixels: np.ndarray, mode: str | None = None) -> Path:
    """Save `pixels` ((H, W) grey or (H, W, 3) RGB) with Pillow; the format from the suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(pixels)
    (image.convert(mode) if mode else image).save(path)
    return path


def _tree(root: Path, classes=("zebra", "ant", "moth"), per_class: int = 3) -> dict:
    """Grey 5x6 PNGs, `per_class` a class: {class name: [(H, W) arrays in file order]}."""
    rng = np.random.default_rng(RNG_SEED)
    written = {}
    for name in classes:
        written[name] = [_grey(rng) for _ in range(per_class)]
        for i, pixels in enumerate(written[name]):
            _write(root / name / f"img{i}.png", pixels)
    return written


def _expected(written: dict) -> tuple[np.ndarray, np.ndarray]:
    """The tree's images (N, 1, H, W) and labels in class-name order, then file order."""
    names = sorted(written)
    x = np.stack([p for name in names for p in written[name]])[:, None]
    y = np.array([i for i, name in enumerate(names) for _ in written[name]], dtype=np.int64)
    return x, y


# --- reading a tree ------------------------------------------------------------------------


def test_train_and_test_folders_are_the_split_read_back_exactly_in_sorted_class_order(tmp_path):
    train = _tree(tmp_path / "train", per_class=3)
    test = _tree(tmp_path / "test", classes=("moth", "ant", "zebra"), per_class=2)

    raw = load_source(f"images:{tmp_path}", SourceOptions())

    x_train, y_train = _expected(train)
    x_test, y_test = _expected(test)
    assert raw.attrs["class_names"] == ["ant", "moth", "zebra"]
    assert raw.num_classes == 3 and raw.task == "classification"
    assert raw.x_train.dtype == np.uint8 and raw.y_train.dtype == np.int64
    np.testing.assert_array_equal(raw.x_train, x_train)
    np.testing.assert_array_equal(raw.y_train, y_train)
    np.testing.assert_array_equal(raw.x_test, x_test)
    np.testing.assert_array_equal(raw.y_test, y_test)


def test_a_flat_tree_is_split_by_test_fraction_stratified_and_seeded(tmp_path):
    written = _tree(tmp_path, per_class=5)

    raw = load_source(f"images:{tmp_path}", SourceOptions(test_fraction=0.4, seed=3))

    x, y = _expected(written)
    x_train, y_train, x_test, y_test = split_train_test(x, y, test_fraction=0.4, seed=3)
    np.testing.assert_array_equal(raw.x_train, x_train)
    np.testing.assert_array_equal(raw.y_train, y_train)
    np.testing.assert_array_equal(raw.x_test, x_test)
    np.testing.assert_array_equal(raw.y_test, y_test)
    assert np.bincount(raw.y_test).tolist() == [2, 2, 2]
    assert raw.source == f"images:{tmp_path.name}"


def test_rgb_and_jpeg_files_give_three_channels_as_pillow_decodes_them(tmp_path):
    rng = np.random.default_rng(1)
    rgb = [rng.integers(0, 256, size=(4, 7, 3), dtype=np.uint8) for _ in range(4)]
    for i, pixels in enumerate(rgb):
        _write(tmp_path / "train" / ("a" if i % 2 else "b") / f"{i}.png", pixels)
        _write(tmp_path / "test" / ("a" if i % 2 else "b") / f"{i}.jpg", pixels)

    raw = load_source(f"images:{tmp_path}", SourceOptions())

    np.testing.assert_array_equal(
        raw.x_train, np.stack([rgb[1], rgb[3], rgb[0], rgb[2]]).transpose(0, 3, 1, 2)
    )
    jpegs = [
        tmp_path / "test" / c / f"{i}.jpg" for c, i in (("a", 1), ("a", 3), ("b", 0), ("b", 2))
    ]
    decoded = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in jpegs])
    np.testing.assert_array_equal(raw.x_test, decoded.transpose(0, 3, 1, 2))
    assert raw.y_test.tolist() == [0, 0, 1, 1]


def test_image_size_resizes_bilinear_to_height_by_width(tmp_path):
    train = _tree(tmp_path / "train", per_class=2)
    _tree(tmp_path / "test", per_class=1)

    raw = load_source(f"images:{tmp_path}", SourceOptions(resize=(3, 4)))

    resized = [
        np.asarray(Image.fromarray(p).resize((4, 3), Image.Resampling.BILINEAR))
        for name in sorted(train)
        for p in train[name]
    ]
    assert raw.x_train.shape == (6, 1, 3, 4) and raw.x_test.shape == (3, 1, 3, 4)
    np.testing.assert_array_equal(raw.x_train, np.stack(resized)[:, None])


@pytest.mark.parametrize(("text", "size"), [("28", (28, 28)), ("32x48", (32, 48)), ("5X3", (5, 3))])
def test_parse_image_size_reads_h_or_hxw(text, size):
    assert parse_image_size(text) == size


@pytest.mark.parametrize("text", ["0", "3x", "x4", "axb", "2x3x4", "-2", "3x0"])
def test_parse_image_size_refuses_malformed_sizes(text):
    with pytest.raises(ValueError, match="--image-size"):
        parse_image_size(text)


def test_channels_convert_colour_to_grey_and_grey_to_colour(tmp_path):
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    grey = _grey(rng)
    for split in ("train", "test"):
        _write(tmp_path / "rgb" / split / "a" / "0.png", rgb)
        _write(tmp_path / "rgb" / split / "b" / "0.png", rgb)
        _write(tmp_path / "grey" / split / "a" / "0.png", grey)
        _write(tmp_path / "grey" / split / "b" / "0.png", grey)

    as_grey = load_source(f"images:{tmp_path / 'rgb'}", SourceOptions(channels=1))
    as_rgb = load_source(f"images:{tmp_path / 'grey'}", SourceOptions(channels=3))

    np.testing.assert_array_equal(
        as_grey.x_train[0, 0], np.asarray(Image.fromarray(rgb).convert("L"))
    )
    assert as_grey.x_train.shape == (2, 1, 5, 6)
    assert as_rgb.x_train.shape == (2, 3, 5, 6)
    np.testing.assert_array_equal(as_rgb.x_train[0], np.stack([grey] * 3))


def test_rgba_and_palette_become_rgb_and_a_mixed_tree_is_stored_as_rgb(tmp_path):
    rng = np.random.default_rng(3)
    grey, rgb = _grey(rng), rng.integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    _write(tmp_path / "a" / "grey.png", grey)
    _write(tmp_path / "a" / "rgba.png", rgb, mode="RGBA")
    palette = _write(tmp_path / "b" / "p.png", rgb, mode="P")
    _write(tmp_path / "b" / "rgb.png", rgb)

    raw = load_source(f"images:{tmp_path}", SourceOptions(test_fraction=0.5, seed=0))

    x = np.stack(  # file order: a/grey, a/rgba, b/p, b/rgb
        [
            np.stack([grey] * 3),
            rgb.transpose(2, 0, 1),
            np.asarray(Image.open(palette).convert("RGB")).transpose(2, 0, 1),
            rgb.transpose(2, 0, 1),
        ]
    )
    x_train, y_train, x_test, y_test = split_train_test(
        x, np.array([0, 0, 1, 1]), test_fraction=0.5, seed=0
    )
    np.testing.assert_array_equal(raw.x_train, x_train)
    np.testing.assert_array_equal(raw.y_train, y_train)
    np.testing.assert_array_equal(raw.x_test, x_test)
    np.testing.assert_array_equal(raw.y_test, y_test)


def test_hidden_files_and_folders_are_ignored_and_class_folders_are_searched_down(tmp_path):
    written = _tree(tmp_path, classes=("a", "b"), per_class=2)
    (tmp_path / "a" / ".DS_Store").write_bytes(b"\x00\x01 not an image")
    _write(tmp_path / ".thumbs" / "x.png", _grey(np.random.default_rng(0)))
    _write(tmp_path / "b" / ".cache" / "y.png", _grey(np.random.default_rng(0)))
    nested = _write(tmp_path / "b" / "more" / "z.png", written["b"][0])

    raw = load_source(f"images:{tmp_path}", SourceOptions(test_fraction=0.25))

    x = np.stack([*written["a"], *written["b"], written["b"][0]])[:, None]  # b/more/z.png last
    x_train, y_train, x_test, y_test = split_train_test(
        x, np.array([0, 0, 1, 1, 1]), test_fraction=0.25, seed=0
    )
    assert raw.attrs == {"class_names": ["a", "b"]}
    np.testing.assert_array_equal(raw.x_train, x_train)
    np.testing.assert_array_equal(raw.y_train, y_train)
    np.testing.assert_array_equal(raw.x_test, x_test)
    np.testing.assert_array_equal(raw.y_test, y_test)
    assert nested.is_file()


def test_decoding_over_processes_gives_the_same_arrays_in_the_same_order(tmp_path):
    _tree(tmp_path, per_class=4)
    paths = sorted(str(p) for p in tmp_path.rglob("*.png")) * 30

    serial = decode_images(paths, mode=None, size=None, num_workers=1)
    pooled = decode_images(paths, mode=None, size=(4, 4), num_workers=2)
    pooled_full = decode_images(paths, mode=None, size=None, num_workers=2)

    assert len(pooled_full) == len(serial) == 360
    assert all((a == b).all() for a, b in zip(serial, pooled_full, strict=True))
    assert all(p.shape == (1, 4, 4) for p in pooled)


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
    assert prepare_out.err.strip() == "skipped 2 file(s) Pillow cannot read"
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

    with pytest.warns(UserWarning, match="skipped 2 unreadable file") as caught:
        dask_dane.prepare(tmp_path / "s.zarr", f"images:{tmp_path / 'tree'}", skip_bad=True)

    assert caught[0].filename == __file__
