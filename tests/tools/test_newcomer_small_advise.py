"""`dane advise` on a small store: never more workers than the store's rows support, by the
run's own noise-scale test, and the reason printed where it caps."""

from __future__ import annotations

import json

import dask_dane
from dask_dane.pipeline.advise import scaling_rows, store_cap
from dask_dane.pipeline.observe.progress import noise_warning


def test_advise_caps_the_workers_at_what_a_168_row_store_supports(dane_here, tmp_path):
    # 210 synthetic rows: 168 train; after 200 SGD steps B_simple is ~440 rows, so the rule
    # alone would take 8 workers of 32 rows: 256 rows a step from a store of 168.
    store = dask_dane.prepare(tmp_path / "small.zarr", "synthetic", samples=210)
    out = tmp_path / "advice.json"

    done = dane_here("advise", str(store), "--steps", "200", "--json", str(out), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    advice = json.loads(out.read_text())
    assert advice["train_rows"] == 168
    assert advice["workers_worth"] * 32 <= 168
    assert advice["capped"]["rule_worth"] > advice["workers_worth"]
    assert f"workers worth paying for: {advice['workers_worth']} (" in done.stdout
    assert "rows a step, more than the store's 168 training rows" in done.stdout


def test_the_cap_is_the_runs_noise_warning_where_the_rows_allow_more():
    rows = scaling_rows(1e6, 32)  # a rule that would take every count

    cap = store_cap(rows, batch=32, train_rows=10**6, noise_scale=20.0)

    # 4 x 32 = 128 rows is 6.4x a noise scale of 20: dane train would warn there
    run = {"round": 2, "noise_scale_ema": 20.0}
    assert noise_warning({**run, "num_workers": 2}, 32) is None
    assert noise_warning({**run, "num_workers": 4}, 32) is not None
    assert cap == (2, "4 workers x --batch-size 32 = 128 rows a step, 6x the gradient noise "
                      "scale (20 rows)")  # fmt: skip


def test_a_store_that_supports_every_count_is_not_capped():
    assert store_cap(scaling_rows(1e6, 32), batch=32, train_rows=10**6, noise_scale=1e6) is None
