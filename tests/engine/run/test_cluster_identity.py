"""cluster_identity: the workers of a running cluster, every time it is asked.

distributed's Client.scheduler_info() returns the client's cached identity, which the
client's periodic refresh (workers left out) can overwrite between the fetch and the return:
a run then read a cluster of two running workers as one with none. Here the refresh runs
every millisecond, so that a read through the cache would race it hundreds of times.
"""

from __future__ import annotations

import dask
import pytest
from distributed import Client

from dask_dane.pipeline.engine.run.bounded import cluster_identity


@pytest.mark.cluster
def test_the_workers_are_listed_while_the_client_refreshes_its_cache(cluster_client):
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        client = Client(cluster_client.scheduler.address, set_as_default=False)
    try:
        expected = set(cluster_identity(cluster_client)["workers"])
        listed = [set(cluster_identity(client)["workers"]) for _ in range(1000)]
    finally:
        client.close()

    assert len(expected) == 2
    assert all(workers == expected for workers in listed)
