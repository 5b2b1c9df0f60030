"""The images:DIR source reading an ImageFolder tree: read back exactly, split, resized,
converted, hidden files ignored, decoded over processes in the same order."""

from __future__ import annotations

from pathlib import Path

import image_trees
import numpy as np
import pytest
from PIL import Image

from dask_dane.datasets.images import decode_images, parse_image_size
from dask_dane.datasets.sources import SourceOptions, load_source, split_train_test

HERE = Path(__file__).resolve().parents[1]  # tests/


_grey, _write = image_trees._grey, image_trees._write
_tree, _expected = image_trees._tree, image_trees._expected


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
