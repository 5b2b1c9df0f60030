"""Where a store lives (datasets/location.py): paths made absolute, URLs kept, and one line
for what cannot work. Fast: no server (tests/datasets/test_s3_server.py runs against a real one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dask_dane.datasets import location


def test_paths_become_absolute_and_file_urls_are_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert location.resolve("s.zarr") == str(tmp_path / "s.zarr")
    assert location.resolve(f"file://{tmp_path}/s.zarr") == str(tmp_path / "s.zarr")
    assert not location.is_remote("file:///x.zarr") and location.is_remote("s3://b/x.zarr")
    assert not location.exists(str(tmp_path / "s.zarr"))
    (tmp_path / "s.zarr").mkdir()
    assert location.exists(str(tmp_path / "s.zarr"))
    location.remove(str(tmp_path / "s.zarr"))
    assert not (tmp_path / "s.zarr").exists()


def test_a_url_that_lost_a_slash_or_names_no_filesystem_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="lost a slash"):
        location.resolve("s3:/bucket/x.zarr")  # what pathlib makes of s3://bucket/x.zarr
    with pytest.raises(ValueError, match="nosuchfs"):
        location.resolve("nosuchfs://bucket/x.zarr")


def test_a_missing_filesystem_package_is_named(monkeypatch):
    import fsspec

    def missing(url: str, **kwargs: object) -> None:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec, "url_to_fs", missing)
    with pytest.raises(ValueError, match=r"needs s3fs; install it \(pip install 'dask-dane\[s3\]'"):
        location.resolve("s3://bucket/x.zarr")
    with pytest.raises(ValueError, match="needs gcsfs"):
        location.filesystem("gs://bucket/x.zarr")


def test_remote_problems_say_what_to_check_without_the_secret():
    denied = location.remote_problem("s3://b/x", PermissionError("Forbidden\nsecret-detail"))
    unreachable = location.remote_problem("s3://b/x", ConnectionRefusedError("refused"))

    assert "access denied (Forbidden)" in denied and "AWS_SECRET_ACCESS_KEY" in denied
    assert "secret-detail" not in denied  # first line only
    assert "cannot be reached (ConnectionRefusedError: refused)" in unreachable
    assert "AWS_ENDPOINT_URL" in unreachable
    assert os.linesep not in denied + unreachable
    assert Path(location.resolve(".")).is_absolute()
