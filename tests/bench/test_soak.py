"""A short soak (the long one is `dane bench soak --rounds 300`, see docs/results.md)."""

from __future__ import annotations

import json

import pytest

from dask_dane.bench.common.output import write_json
from dask_dane.bench.common.specs import spec_of
from dask_dane.bench.soak.run import LIMIT_DRIFT, SoakSpec, census, markdown_table, run_soak

pytestmark = pytest.mark.cluster


def test_short_soak_leaves_nothing_behind_and_stays_flat(tmp_path):
    # 60 rounds after warm-up: one step of the allocator (tens of KiB, at a random round)
    # moves a Theil-Sen slope by about its size over the rounds measured; over 20 rounds it
    # read 4.3-5.5 KiB a round with no leak, too close to the 4 KiB bound.
    # The workers' memory ramps up for the first 20-30 rounds (a round is a few tens of ms;
    # the ramp ended near round 21 with a round's 4 dependent steps, near round 30 with 2),
    # then stays flat: 30 rounds of warm-up, 60 measured.
    spec = spec_of(SoakSpec, rounds=90, warmup=30, workers=2, local_steps=3, workdir=str(tmp_path))

    result = run_soak(spec.validate(), log=lambda line: None)

    summary = result["summary"]
    assert [s["round"] for s in result["samples"]] == list(range(1, 91))
    # Between rounds the scheduler holds exactly the shards and the test split, of the
    # recorded round only its update on each worker (the round after the one in flight starts
    # from it; none after the last), and the one round the pipelined driver keeps ahead.
    assert summary["max_leftover_tasks"] == 0, result["samples"]
    assert summary["max_extra_futures"] == 0
    assert all(s["scheduler_tasks"] == 4 for s in result["samples"])  # 2 shards, 2 pieces
    assert [s["rounds_ahead"] for s in result["samples"]] == [1] * 89 + [0]
    assert [s["carry_tasks"] for s in result["samples"]] == [2] * 89 + [0]
    assert abs(summary["driver_growth_pct"]) < 5
    assert abs(summary["worker_growth_pct"]) < 5
    # Per-round slopes (Theil-Sen): the workers' measured 0.0 and 0.3 KiB a round (300 and 50
    # rounds), the driver's 22 and 29 KiB (it holds the in-process scheduler and the rows).
    # A model copy kept a round (the MLP: 18.8 KiB) on the workers would be 19 KiB a round;
    # on the driver it would double its slope.
    assert abs(summary["worker_bytes_per_round"]) < 4 * 2**10, summary
    assert abs(summary["driver_bytes_per_round"]) < 48 * 2**10, summary
    # The round-time drift is a timing, measured by the bench (`dane bench soak`: 0.92 over
    # 300 rounds), not asserted here: on a shared 2-core machine the median of 6 rounds at
    # each end read 1.23 once with nothing growing. What is asserted is that the verdict
    # folds it in: every other part of it holds, as asserted above.
    assert summary["round_time_drift"] > 0
    assert summary["ok"] == (summary["round_time_drift"] < LIMIT_DRIFT), summary
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
        spec_of(SoakSpec, rounds=20, warmup=15).validate()


def test_census_tells_data_from_recorded_rounds_and_rounds_in_flight():
    keys = [
        "load_shard-0-5f3a9c01",  # a shard: its index is not a round
        "load_shard-1-5f3a9c01",
        "load_test-5f3a9c01",
        "update-3-0-5f3a9c01a1",  # an earlier round's update, still held: a leak
        "update-4-0-5f3a9c01a1",  # the recorded round's: round 6 starts from it (carry)
        "local_grad-4-1-5f3a9c01a1",  # the recorded round's phase output: a leak
        "update-5-0-5f3a9c01a1",  # the round in flight
        "score-6-0-5f3a9c01",
    ]
    assert census(keys, recorded=4) == {"other": 3, "carry": 1, "stale": 2, "ahead": 2}
    assert census(keys, recorded=6) == {"other": 3, "carry": 0, "stale": 5, "ahead": 0}
