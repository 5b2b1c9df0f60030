"""A shard whose load kills its worker again and again (a nanny restarting it past its memory
limit, until the scheduler gives up: Dask's KilledWorker) ends the run with one line naming
the shard and the fix (issue 36), not Dask's exception; other load errors pass as they are."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from distributed.scheduler import KilledWorker

from dask_dane.pipeline import training
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.shard_memory import killed_loading


def _killed(key: str) -> KilledWorker:
    return KilledWorker(key, SimpleNamespace(address="tcp://127.0.0.1:40001"), 3)


class _FailingClient:
    """client.submit as _load_shards calls it; the load of one key fails with `error`."""

    def __init__(self, failing: str, error: BaseException) -> None:
        self.failing, self.error = failing, error

    def submit(self, function, *, key: str, **kwargs):  # type: ignore[no-untyped-def]
        failed = key.startswith(self.failing)
        return SimpleNamespace(
            status="error" if failed else "finished", exception=lambda: self.error
        )


@pytest.mark.parametrize(("failing", "named"), [("load_shard-1-", "shard 1"),
                                                ("load_test-", "the test split")])  # fmt: skip
def test_a_load_killing_its_workers_is_one_line_naming_the_shard(
    monkeypatch, digits_stores, failing, named
):
    setup = prepare_run(RunConfig(store=str(digits_stores[2])))
    monkeypatch.setattr(training, "wait_for", lambda *args: None)
    client = _FailingClient(failing, _killed(failing + "x"))

    with pytest.raises(ValueError) as caught:
        training._load_shards(client, setup, ["tcp://a", "tcp://b"])

    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"loading {named} killed its worker")
    assert "--shard-memory stream" in line and failing in line  # Dask's words name the task


def test_other_load_errors_are_raised_as_they_are(monkeypatch, digits_stores):
    setup = prepare_run(RunConfig(store=str(digits_stores[2])))
    monkeypatch.setattr(training, "wait_for", lambda *args: None)
    damaged = ValueError("store x: shard 0 (rows [0, 10)) cannot be read")

    with pytest.raises(ValueError) as caught:
        training._load_shards(
            _FailingClient("load_shard-0-", damaged), setup, ["tcp://a", "tcp://a"]
        )

    assert caught.value is damaged


def test_a_long_dask_message_is_cut_to_keep_the_line_short():
    line = killed_loading(0, _killed("load_shard-0-" + "k" * 400))
    assert "shard 0" in line and len(line) < 320 and "..." in line
