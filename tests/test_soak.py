"""A short soak (the long one is `dane bench soak --rounds 300`, see docs/results.md)."""

from __future__ import annotations

import json

import pytest

from dask_dane.bench.common.output import write_json
from dask_dane.bench.soak.run import LIMIT_DRIFT, SoakSpec, markdown_table, run_soak

pytestmark = pytest.mark.cluster


def test_short_soak_leaves_nothing_behind_and_stays_flat(tmp_path):
    spec = SoakSpec(rounds=30, warmup=10, workers=2, local_steps=3, workdir=str(tmp_path))

    result = run_soak(spec.validate(), log=lambda line: None)

    summary = result["summary"]
    assert [s["round"] for s in result["samples"]] == list(range(1, 31))
    # Between rounds the scheduler holds exactly the shards and the test split, nothing else.
    assert summary["max_leftover_tasks"] == 0, result["samples"]
    assert summary["max_extra_futures"] == 0
    assert all(s["scheduler_tasks"] == 3 for s in result["samples"])
    assert abs(summary["driver_growth_pct"]) < 5
    assert abs(summary["worker_growth_pct"]) < 5
    # Per-round slopes (Theil-Sen): the workers' measured 0.0 and 0.3 KiB a round (300 and 50
    # rounds), the driver's 22 and 29 KiB (it holds the in-process scheduler and the rows).
    # A model copy kept a round (the MLP: 18.8 KiB) on the workers would be 19 KiB a round;
    # on the driver it would double its slope.
    assert abs(summary["worker_bytes_per_round"]) < 4 * 2**10, summary
    assert abs(summary["driver_bytes_per_round"]) < 48 * 2**10, summary
    # Medians of 5 rounds at each end: measured 0.92 (300 rounds) and 1.02 (50 rounds); the
    # bench's own bound (LIMIT_DRIFT, 1.2) is part of its verdict, asserted whole here.
    assert summary["round_time_drift"] < LIMIT_DRIFT
    assert summary["ok"], summary
    # Distributed's fixed-length logs were full when the measurement began (SOAK_DASK_CONFIG):
    # their filling is not counted as growth.
    logs = [fill for worker in result["logs_at_warmup"].values() for fill in worker.values()]
    assert len(logs) == 2 * 5
    assert all(held == kept == 20 for held, kept in logs), result["logs_at_warmup"]
    write_json(result, tmp_path / "soak.json")
    assert json.loads((tmp_path / "soak.json").read_text())["summary"] == summary
    assert "tasks left on the scheduler" in markdown_table(result)


def test_soak_spec_rejects_too_few_rounds_after_warm_up():
    with pytest.raises(ValueError, match="--warmup"):
        SoakSpec(rounds=20, warmup=15).validate()
