"""`dane bench collective-crossover` and `dane bench collective`'s summary: real measurements
on a tiny size, checked for what they must hold, never for how fast they are."""

from __future__ import annotations

import json

import pytest

from dask_dane.bench.collective.report import markdown_table
from dask_dane.bench.collective.run import _summary

pytestmark = pytest.mark.bench


@pytest.mark.cluster
def test_the_crossover_times_a_hop_and_the_groups_collectives_at_each_size(tmp_path, dane_here):
    out = tmp_path / "crossover.json"
    done = dane_here(
        "bench", "collective-crossover", "--sizes", "0.01,0.1", "--json", str(out), cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["mib"] for r in rows] == [0.01, 0.1]
    for row in rows:
        # Each timed for real (the all-gather checks its bytes arrived: bench/scaling/gloo.py).
        # No order between the timings is asserted: on a loaded machine either may come first.
        assert row["hop_ms"] > 0 and row["gloo_raw_ms"] > 0 and row["gloo_packed_ms"] > 0
        # ... and the exchange's sum checked: every rank got 1 + 2 in every weight.
        assert row["exchange_ms"] > 0 and row["gloo_allreduce_ms"] > 0
    assert "| 0.1 |" in done.stdout


def _run(config: str, collective: str, ms: float, compute_ms: float) -> dict:
    fixed = {
        "workers": 2, "ms_per_round": ms, "compute_ms": compute_ms, "hop_ms": 6.0,
        "fixed_cost_hops": ms / 6.0, "fixed_cost_allgathers": ms / 0.5, "round_form": collective,
        "gloo": {"raw_ms": 0.5, "payload_bytes": 1000},
    }  # fmt: skip
    scaling = {
        "fixed_cost": [fixed],
        "runs": [{"workers": 2, "median": {"wall_s": ms / 1e3}}],
        "spec": {"model": "small-cnn"},
        "model_bytes": 1000,
    }
    return {"config": config, "collective": collective, "repeat": 0, "scaling": scaling}


def test_the_summary_takes_the_compute_out_of_the_round_and_counts_it_in_hops():
    runs = [_run("dane", "dask", 30.0, 15.0), _run("dane", "torch", 18.0, 15.5)]

    rows = _summary(runs)

    assert [(r["config"], r["collective"]) for r in rows] == [("dane", "dask"), ("dane", "torch")]
    assert rows[1]["engine_ms"] == pytest.approx(2.5)
    assert rows[1]["engine_hops"] == pytest.approx(2.5 / 6.0)
    assert rows[0]["fixed_hops"] == pytest.approx(5.0)
    assert "2.5 ms" in markdown_table({"summary": rows})
