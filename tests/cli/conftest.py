"""Fixtures the command-line tests share."""

from __future__ import annotations

import pytest

from dask_dane.pipeline.setup.config import RunConfig


@pytest.fixture
def planned(monkeypatch) -> list[RunConfig]:
    """`dane train` up to training.train: the RunConfig it would run, no cluster started."""
    seen: list[RunConfig] = []

    def fake_train(config, **_):
        seen.append(config)
        return {"algorithm": config.algorithm, "rounds": 0, "final_test_accuracy": None}

    monkeypatch.setattr("dask_dane.pipeline.training.train", fake_train)
    return seen
