"""Fixtures the engine tests share."""

from __future__ import annotations

import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store


@pytest.fixture(scope="session")
def table(tmp_path_factory) -> str:
    """digits-tabular in 4 shards (float64 features), 2 on each of the shared cluster's 2
    workers: every algorithm trains on it (tests/run_configs.py's LOGISTIC)."""
    raw = load_source("digits-tabular", SourceOptions(seed=0))
    path = tmp_path_factory.mktemp("table") / "digits.zarr"
    return write_store(raw, PartitionSpec(num_shards=4, seed=0), path, force=False).path
