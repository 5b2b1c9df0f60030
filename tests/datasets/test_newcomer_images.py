"""`dane prepare images:DIR` on the trees people have: --skip-bad names the files it skipped,
and the files operating systems leave beside images (Thumbs.db, desktop.ini, .DS_Store,
__MACOSX) are ignored, while a real unreadable image still fails naming it."""

from __future__ import annotations

import warnings
from pathlib import Path

import image_trees
import zarr

import dask_dane
from dask_dane.datasets.store import open_store


def _tree(root: Path) -> int:
    """Three classes of four grey PNGs; the number of images."""
    written = image_trees._tree(root, per_class=4)
    return sum(len(images) for images in written.values())


def _prepare(dane_here, tmp_path: Path, *extra: str):
    store = tmp_path / "s.zarr"
    done = dane_here("prepare", f"images:{tmp_path / 'tree'}", "--out", str(store), *extra,
                     cwd=tmp_path)  # fmt: skip
    return done, store


def test_skip_bad_names_the_first_skipped_files_then_counts_the_rest(dane_here, tmp_path):
    _tree(tmp_path / "tree")
    bad = [tmp_path / "tree" / "ant" / f"notes{i}.txt" for i in range(7)]
    for path in bad:
        path.write_text("not an image")

    done, _ = _prepare(dane_here, tmp_path, "--skip-bad")

    assert done.returncode == 0, done.stderr
    named = ", ".join(str(path) for path in bad[:5])
    assert done.stderr.strip() == f"skipped 7 file(s) Pillow cannot read: {named} and 2 more"


def test_the_api_warns_with_the_same_names(tmp_path):
    _tree(tmp_path / "tree")
    bad = tmp_path / "tree" / "moth" / "readme.txt"
    bad.write_text("not an image")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dask_dane.prepare(tmp_path / "s.zarr", f"images:{tmp_path / 'tree'}", skip_bad=True)

    notes = [str(w.message) for w in caught if w.category is UserWarning]
    assert notes == [f"skipped 1 file(s) Pillow cannot read: {bad}"]


def _os_metadata(root: Path) -> None:
    """What Windows Explorer, macOS and a zip made on a Mac leave in an image tree."""
    for name in ("ant", "moth"):
        (root / name / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0 not an image")
        (root / name / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / "zebra" / "desktop.ini").write_text("[.ShellClassInfo]\n")
    (root / "zebra" / "._img0.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (root / "__MACOSX" / "ant").mkdir(parents=True)
    (root / "__MACOSX" / "ant" / "._img0.png").write_bytes(b"\x00\x05\x16\x07")


def test_os_metadata_files_are_ignored_without_skip_bad(dane_here, tmp_path):
    images = _tree(tmp_path / "tree")
    _os_metadata(tmp_path / "tree")

    done, store = _prepare(dane_here, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    info = open_store(store)
    assert zarr.open_group(store, mode="r").attrs["class_names"] == ["ant", "moth", "zebra"]
    assert info.num_train + info.num_test == images


def test_os_metadata_is_not_counted_as_skipped(dane_here, tmp_path):
    _tree(tmp_path / "tree")
    _os_metadata(tmp_path / "tree")

    done, store = _prepare(dane_here, tmp_path, "--skip-bad")

    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "skipped 0 file(s) Pillow cannot read"
    assert zarr.open_group(store, mode="r").attrs["skipped_files"] == 0


def test_an_unreadable_image_beside_os_metadata_still_fails_naming_it(dane_here, tmp_path):
    _tree(tmp_path / "tree")
    _os_metadata(tmp_path / "tree")
    broken = tmp_path / "tree" / "moth" / "img9.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n truncated")

    done, store = _prepare(dane_here, tmp_path)

    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {broken} ")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Thumbs.db" not in done.stderr
    assert not store.exists()
