"""The engine's way out to what watches a run: Callbacks hear its end, with the summary
written to summary.json, and its failure, with the error, before the caller does; the
trackers are plugged in by the CLI and the API through them, not by the engine."""

from __future__ import annotations

import json

import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.pipeline.engine.run.callbacks import Callbacks, chain
from dask_dane.pipeline.engine.run.errors import TrainingDiverged
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.training import train


def test_chain_calls_each_in_turn_for_every_event():
    heard: list[tuple[str, object]] = []
    first = Callbacks(on_end=lambda s: heard.append(("first", s)))
    second = Callbacks(
        on_end=lambda s: heard.append(("second", s)),
        on_failure=lambda e: heard.append(("failure", e)),
    )
    both = chain(first, second)
    both.on_end({"rounds": 1})
    both.on_failure(err := ValueError("x"))
    assert heard == [("first", {"rounds": 1}), ("second", {"rounds": 1}), ("failure", err)]


@pytest.mark.cluster
def test_the_end_and_a_failure_are_heard(cluster_client, digits_stores, tmp_path):
    heard: dict[str, object] = {}
    callbacks = Callbacks(
        on_end=lambda summary: heard.setdefault("end", summary),
        on_failure=lambda err: heard.setdefault("failure", err),
    )
    config = RunConfig(
        store=str(digits_stores[2]), model="mlp", rounds=2, out=str(tmp_path / "ok")
    ).validate()

    summary = train(config, callbacks=callbacks, client=cluster_client)

    assert heard == {"end": summary}
    assert json.loads((tmp_path / "ok" / "summary.json").read_text()) == summary

    heard.clear()
    ridge = tmp_path / "ridge.zarr"
    raw = load_source("synthetic-ridge", SourceOptions(samples=200))
    write_store(raw, PartitionSpec(num_shards=2), ridge, force=False)
    # Gradient descent with a step far above 2/L: the weights grow ~1e100-fold per round.
    diverging = RunConfig(
        store=str(ridge), model="linear", algorithm="gd", local_lr=1e100, dtype="float64",
        rounds=10, out=str(tmp_path / "diverged"),
    ).validate()  # fmt: skip
    with pytest.raises(TrainingDiverged) as diverged:
        train(diverging, callbacks=callbacks, client=cluster_client)
    assert heard == {"failure": diverged.value}
