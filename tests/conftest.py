"""Shared fixtures: small stores and one LocalCluster of 2 single-threaded workers."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import dask
import pytest
import torch

# The convex problems' fixtures, kept in their own module (tests/convex_fixtures.py).
from convex_fixtures import exact_setup, shard_quadratics, small_least_squares  # noqa: F401

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store

# `--collective torch` takes a lease on each worker (pipeline/engine/run/segment_cluster.py); a
# driver a test kills holding one frees it after Dask's lease-timeout, 30 s by default. The
# schedulers of the tests (in this process, or started by it) lapse it in 3 s, so that the
# resumed run does not wait out the default (the behaviour is the same, only sooner).
LEASES = {
    "DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_TIMEOUT": "3s",
    "DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_VALIDATION_INTERVAL": "1s",
}
os.environ.update(LEASES)  # the schedulers started as processes
dask.config.set(
    {  # and this process's, and its clients'
        "distributed.scheduler.locks.lease-timeout": "3s",
        "distributed.scheduler.locks.lease-validation-interval": "1s",
    }
)


def _fork_workers_from_a_warm_server() -> None:
    """LocalCluster workers started in this process fork from a server that has imported
    the engine (torch among it) once, instead of each importing it again (about 4 s of CPU
    a worker). Distributed's own test suite starts its workers this way. A `dane` process
    the tests start keeps Dask's default (spawn), as a user's does."""
    import multiprocessing.forkserver

    import dask
    import distributed.utils

    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    distributed.utils.get_mp_context()  # distributed sets its own preload list first
    preload = multiprocessing.forkserver._forkserver._preload_modules or []
    round_ = "dask_dane.pipeline.engine.round"
    engine = [f"{round_}.tasks", f"{round_}.worker"]
    multiprocessing.forkserver.set_forkserver_preload([*preload, *engine])


_fork_workers_from_a_warm_server()


@pytest.fixture(autouse=True)
def _single_thread_torch():
    # Workers run torch with one thread; the in-process reference must too, so both add
    # floating-point numbers in the same order.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def digits_stores(tmp_path_factory) -> dict[int, Path]:
    """The digits source as stores of 1, 2 and 4 iid shards."""
    root = tmp_path_factory.mktemp("stores")
    raw = load_source("digits", SourceOptions(seed=0))
    return {
        shards: write_store(
            raw,
            PartitionSpec(num_shards=shards, seed=0),
            root / f"digits-{shards}.zarr",
            force=False,
        ).path
        for shards in (1, 2, 4)
    }


@pytest.fixture(scope="session")
def cluster_client():
    """One LocalCluster (2 processes x 1 thread, loopback only) shared by the cluster tests."""
    import dask
    from distributed import Client, LocalCluster

    from dask_dane.pipeline.launchers.cluster import CLUSTER_CONFIG, TorchThreads

    with dask.config.set(CLUSTER_CONFIG):
        cluster = LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
    client = Client(cluster)
    client.register_plugin(TorchThreads())
    yield client
    client.close()
    cluster.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the shared cluster must carry the `cluster` marker, so that
    `make test-fast` (-m "not cluster") never starts one."""
    unmarked = [
        item.nodeid
        for item in items
        if "cluster_client" in getattr(item, "fixturenames", ())
        and item.get_closest_marker("cluster") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "tests that use cluster_client need @pytest.mark.cluster: " + ", ".join(unmarked)
        )


# A model file as a user would write it: BatchNorm (running statistics) and dropout (random
# masks) for 8x8 images, plus callables that break each of the checks before any work.
USER_MODELS = '''
import torch
from torch import nn


def build(in_channels, num_classes):
    """conv - BatchNorm - ReLU - dropout - dense: running statistics and random masks."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(6 * 8 * 8, num_classes),
    )


class Wide(nn.Module):
    def __init__(self, num_classes, sample_shape):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(sample_shape[0] * 64, num_classes))

    def forward(self, x):
        return self.body(x)


def wrong_output(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes + 1))


def fails_when_called(num_classes):
    raise RuntimeError("no weights here")


def not_a_module(num_classes):
    return 42


NOT_CALLABLE = 3
'''


def _dane_here(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    """`dane ARGS` through cli.main() in this process (in `cwd`, DANE_CACHE `cache`, default
    cwd/cache), its output and exit status captured as a `dane` subprocess's would be: for
    tests whose point is not the process boundary (an interpreter start costs 4 s of CPU,
    most of it importing torch; docs/testing.md)."""
    from dask_dane import cli

    stdout, stderr = io.StringIO(), io.StringIO()
    old_argv, old_cache = sys.argv, os.environ.get("DANE_CACHE")
    sys.argv, os.environ["DANE_CACHE"] = ["dane", *args], str(cache or cwd / "cache")
    status = 0
    try:
        with contextlib.chdir(cwd), redirect_stdout(stdout), redirect_stderr(stderr):
            cli.main()
    except SystemExit as done:
        status = done.code if isinstance(done.code, int) else int(done.code is not None)
    finally:
        sys.argv = old_argv
        if old_cache is None:
            os.environ.pop("DANE_CACHE", None)
        else:
            os.environ["DANE_CACHE"] = old_cache
    return subprocess.CompletedProcess(args, status, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="session")
def dane_here():
    """_dane_here, for tests of any scope."""
    return _dane_here


def _run_cli(argv: list[str]) -> int:
    """cli.main() as the `dane` script runs it, in this process; returns the exit status."""
    import sys

    from dask_dane import cli

    old = sys.argv
    sys.argv = ["dane", *argv]
    try:
        cli.main()
    except SystemExit as done:
        return int(done.code or 0)
    finally:
        sys.argv = old
    return 0


@pytest.fixture
def run_cli():
    """_run_cli: `dane ARGS...` in this process, for tests that read its output via capsys."""
    return _run_cli


def _assert_one_line_error(status: int, capfd, fragments) -> None:
    """Exit 2, no traceback, one `error: ...` line on stderr holding every fragment."""
    captured = capfd.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.out + captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def assert_one_line_error():
    """_assert_one_line_error, for the tests of bad input run through run_cli."""
    return _assert_one_line_error


@pytest.fixture(scope="session")
def user_models_text() -> str:
    """USER_MODELS, for fixtures of a wider scope than model_file's."""
    return USER_MODELS


@pytest.fixture
def model_file(tmp_path) -> Path:
    """USER_MODELS written to tmp_path/my_models.py."""
    path = tmp_path / "my_models.py"
    path.write_text(USER_MODELS)
    return path
