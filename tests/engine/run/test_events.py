"""Each round's metrics row as a Dask event (topic "dane"): what any client, the scheduler and
the dashboard can read while a run trains."""

from __future__ import annotations

import json

import pytest

from dask_dane.pipeline.engine.run.bounded import EVENT_TOPIC
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster


def test_every_round_is_published_with_its_run_and_equals_metrics_jsonl(
    digits_stores, cluster_client, tmp_path
):
    runs = {}
    for name in ("a", "b"):  # two runs on one scheduler, told apart by their tags
        config = RunConfig(
            store=str(digits_stores[2]), out=str(tmp_path / name), model="small-cnn",
            rounds=3, local_steps=3, seed=1,
        ).validate()  # fmt: skip
        train(config, client=cluster_client)
        runs[name] = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").open()]

    events = [msg for _, msg in cluster_client.get_events(EVENT_TOPIC)]
    for name, rows in runs.items():
        mine = [e for e in events if e["run_dir"] == str((tmp_path / name).absolute())]
        assert [e["round"] for e in mine] == [1, 2, 3]
        assert len({e["run"] for e in mine}) == 1  # one run token for the whole run
        for event, row in zip(mine, rows, strict=True):
            # msgpack hands lists back as tuples: compare as JSON reads them.
            assert json.loads(json.dumps({k: event[k] for k in row})) == row
    tokens = {e["run"] for e in events if e["run_dir"].startswith(str(tmp_path))}
    assert len(tokens) == 2
