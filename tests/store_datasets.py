"""The raw datasets that tests/datasets/test_store_write.py and tests/datasets/test_store_open.py
write into stores: module-scoped fixtures, which both files import from here."""

from __future__ import annotations

import pytest

from dask_dane.datasets.sources import SourceOptions, load_source


@pytest.fixture(scope="module")
def digits():
    return load_source("digits", SourceOptions(seed=0))


@pytest.fixture(scope="module")
def synthetic():
    return load_source("synthetic", SourceOptions(seed=3, samples=300, image_size=12))
