"""`dask_dane.prepare(..., exist_ok=True)`: a script run a second time reuses the store it
wrote, and a store written from other data or another partition is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import dask_dane
from dask_dane.datasets.store import open_store

RNG = np.random.default_rng(0)
X = RNG.integers(0, 256, size=(40, 1, 4, 4)).astype(np.uint8)
Y = np.arange(40) % 3


def _prepare(out, x=X, y=Y, **options):
    return dask_dane.prepare(out, train=(x[:30], y[:30]), test=(x[30:], y[30:]), **options)


def test_a_second_run_reuses_the_store_it_wrote(tmp_path):
    first = _prepare(tmp_path / "s.zarr", exist_ok=True)
    written = (first / "zarr.json").stat().st_mtime_ns

    again = _prepare(tmp_path / "s.zarr", exist_ok=True)

    assert again == first
    assert (again / "zarr.json").stat().st_mtime_ns == written  # not rewritten
    assert open_store(again).num_train == 30


def test_a_named_source_is_reused_too(tmp_path):
    first = dask_dane.prepare(tmp_path / "d.zarr", "digits", samples=100, exist_ok=True)

    assert dask_dane.prepare(tmp_path / "d.zarr", "digits", samples=100, exist_ok=True) == first


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"shards": 3}, r"\(shards 2 there, 3 here\)"),
        ({"seed": 1}, r"\(seed 0 there, 1 here\)"),
        ({"partition": "label-skew"}, r"\(partition iid there, label-skew here\)"),
        ({"x": X[::-1]}, r"\(the test arrays differ\)"),
        ({"x": np.concatenate([X[:30] // 2, X[30:]])}, r"\(the training images' mean differs\)"),
        ({"y": np.concatenate([Y[:30] * 0, Y[30:]])}, r"\(the training labels differ\)"),
        ({"x": X[:, :, :2]}, r"\(sample shape \(1, 4, 4\) there, \(1, 2, 4\) here\)"),
    ],
)
def test_a_store_of_other_data_is_refused_with_the_fix(tmp_path, change, named):
    _prepare(tmp_path / "s.zarr")

    with pytest.raises(ValueError, match=named + "; pass force=True to replace it"):
        _prepare(tmp_path / "s.zarr", exist_ok=True, **change)


def test_another_source_is_refused(tmp_path):
    _prepare(tmp_path / "s.zarr")

    with pytest.raises(ValueError, match=r"\(source arrays there, digits here\)"):
        dask_dane.prepare(tmp_path / "s.zarr", "digits", exist_ok=True)


def test_without_exist_ok_an_existing_store_names_both_ways_out(tmp_path):
    _prepare(tmp_path / "s.zarr")

    with pytest.raises(ValueError, match="pass force=True to replace it, exist_ok=True to reuse"):
        _prepare(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match=r"force=True .* or exist_ok=True .*, not both"):
        _prepare(tmp_path / "s.zarr", force=True, exist_ok=True)
