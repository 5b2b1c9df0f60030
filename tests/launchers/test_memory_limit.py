"""`--memory-limit`: each worker of a started cluster gets it (what --shard-memory auto and the
resident check measure a shard against); a value that is no size is one line."""

from __future__ import annotations

import pytest
from dask.utils import parse_bytes

from dask_dane.pipeline.engine.run.bounded import cluster_identity
from dask_dane.pipeline.launchers.cluster import make_client
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.shard_memory import worker_memory_limit


@pytest.mark.parametrize("bad", ["lots", "0", "-1GiB"])
def test_a_memory_limit_that_is_no_size_is_one_line(bad, run_cli, capfd, assert_one_line_error):
    status = run_cli(["train", "--memory-limit", bad, "--rounds", "1"])
    assert_one_line_error(status, capfd, [f"--memory-limit {bad!r} is not a size"])


@pytest.mark.cluster
def test_each_started_worker_gets_the_limit(digits_stores):
    config = RunConfig(store=str(digits_stores[2]), workers=1, memory_limit="700MiB",
                       dashboard_address="127.0.0.1:0")  # fmt: skip
    with make_client(config) as client:
        client.wait_for_workers(1, timeout=60)
        limit = worker_memory_limit(cluster_identity(client))
    assert limit == parse_bytes("700MiB")
