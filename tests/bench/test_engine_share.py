"""The engine's share of a run, from when its rows land (bench/training/engine_share.py)."""

from __future__ import annotations

import pytest

from dask_dane.bench.training.engine_share import engine_share


def test_the_share_is_what_compute_and_evaluation_leave_of_the_wall_between_rows():
    rows = [
        {"round": t, "max_worker_compute_s": compute, "eval_s": evaluation}
        for t, (compute, evaluation) in enumerate(
            [(9.0, 0.0), (0.5, 0.1), (0.6, 0.2), (0.8, None)], 1
        )
    ]
    arrivals = [10.0, 11.0, 12.0, 13.0]  # a row a second

    figures = engine_share(rows, arrivals, skip=1)

    # Round 1 (warm-up) is left out; rounds 2-4 leave 0.4, 0.2 and 0.2 of their second.
    assert [r["round"] for r in figures["rounds"]] == [2, 3, 4]
    assert [r["share"] for r in figures["rounds"]] == pytest.approx([0.4, 0.2, 0.2])
    assert figures["median_share"] == pytest.approx(0.2)
    assert figures["median_wall_s"] == pytest.approx(1.0)
    assert figures["median_compute_s"] == pytest.approx(0.6)
