"""`dane train` and `dask_dane.train` with no store name the cached digits store they write
or reuse, and DANE_CACHE, on stderr. The scheduler given answers nobody: each call stops
right after the store, before any cluster or run directory."""

from __future__ import annotations

import pytest

import dask_dane

NOBODY = ("--scheduler", "tcp://127.0.0.1:9", "--timeout", "1")  # port 9: discard, closed


def test_dane_train_names_the_store_it_writes_then_the_one_it_reuses(dane_here, tmp_path):
    cache = tmp_path / "cache"
    store = cache / "digits-1shards-seed0.zarr"
    args = ("train", "--workers", "1", "--rounds", "1", *NOBODY)

    first = dane_here(*args, "--out", str(tmp_path / "a"), cwd=tmp_path, cache=cache)
    second = dane_here(*args, "--out", str(tmp_path / "b"), cwd=tmp_path, cache=cache)

    note = "(set DANE_CACHE to keep it elsewhere)"
    assert first.returncode == second.returncode == 2  # no scheduler: after the store
    assert first.stderr.splitlines()[0] == f"writing the digits store once, to {store} {note}"
    assert second.stderr.splitlines()[0] == f"using the digits store in {store} {note}"
    assert store.is_dir()


def test_the_python_api_names_it_too(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("DANE_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "cache" / "digits-1shards-seed0.zarr"

    with pytest.raises(ValueError, match="no Dask scheduler answered"):
        dask_dane.train(workers=1, rounds=1, out=tmp_path / "run", progress=False,
                        scheduler="tcp://127.0.0.1:9", timeout=1)  # fmt: skip

    assert f"writing the digits store once, to {store} " in capfd.readouterr().err
