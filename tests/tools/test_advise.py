"""`dane advise`: the law's arithmetic, the command, and `dane train`'s warning."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from dask_dane.pipeline.advise import MIN_DOUBLING_GAIN, scaling_rows, workers_worth
from dask_dane.pipeline.observe.progress import BATCH_OVER_NOISE, ProgressLines, noise_warning


def test_the_table_follows_the_law():
    # prepare: B_noise = 96 rows, B = 32 rows a worker
    rows = scaling_rows(96.0, 32)
    by_workers = {row.workers: row for row in rows}
    # assert: S/S_min = 1 + B_noise/(mB), E/E_min = 1 + mB/B_noise, speed-up against m = 1
    four = by_workers[4]
    assert four.batch == 128
    assert four.steps == pytest.approx(1 + 96 / 128)
    assert four.examples == pytest.approx(1 + 128 / 96)
    assert four.speedup == pytest.approx((1 + 96 / 32) / (1 + 96 / 128))  # 4 / 1.75
    assert four.doubling_gain == pytest.approx(by_workers[4].speedup / by_workers[2].speedup)
    assert (four.lr_linear, four.lr_sqrt) == (4.0, 2.0)
    # McCandlish's eps_opt(B) = eps_max / (1 + B_noise/B): its ratio equals the speed-up
    assert four.lr_noise == pytest.approx(four.speedup)
    assert [row.workers for row in rows] == [1, 2, 4, 8, 16]
    assert rows[0].speedup == 1.0 and rows[0].doubling_gain is None


def test_a_large_noise_scale_scales_nearly_linearly_and_a_small_one_not_at_all():
    assert scaling_rows(1e9, 32)[-1].speedup == pytest.approx(16, rel=1e-6)
    assert scaling_rows(1e-6, 32)[-1].speedup == pytest.approx(1, abs=1e-6)


@pytest.mark.parametrize(
    ("noise_scale", "worth"),
    [(10.0, 1), (31.0, 1), (64.0, 2), (100.0, 2), (130.0, 4), (300.0, 8), (1e6, 16)],
)
def test_the_workers_worth_paying_for_are_the_largest_m_with_m_b_at_most_b_noise(
    noise_scale, worth
):
    # The rule: doublings that each cut the steps by >= 1.5x; under the law that is m B <= B_noise.
    rows = scaling_rows(noise_scale, 32)
    assert workers_worth(rows) == worth
    assert max([1] + [m for m in (1, 2, 4, 8, 16) if m * 32 <= noise_scale]) == worth
    assert all(r.doubling_gain >= MIN_DOUBLING_GAIN for r in rows[1:] if r.workers <= worth)


def test_the_estimate_averages_trace_and_gradient_apart_over_draws(monkeypatch):
    from dask_dane.pipeline import advise

    draws = iter(
        [{"noise_trace": 2.0, "noise_grad_sq": 1.0}, {"noise_trace": 4.0, "noise_grad_sq": 3.0}]
    )
    monkeypatch.setattr(advise, "_draw", lambda *args: next(draws))

    measure = advise.measure_noise([], None, batch=8, draws=2, seed=0)

    assert (measure.noise_trace, measure.noise_grad_sq) == (3.0, 2.0)
    assert measure.noise_scale == 1.5  # not the mean of the ratios, (2 + 4/3) / 2


def test_advise_prints_the_table_and_writes_json(digits_stores, dane_here, tmp_path):
    out = tmp_path / "advice.json"
    done = dane_here(
        "advise", str(digits_stores[4]), "--model", "mlp", "--batch-size", "16",
        "--draws", "4", "--json", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "noise scale B_simple" in done.stdout and "workers worth paying for" in done.stdout
    advice = json.loads(out.read_text())
    scale = advice["measure"]["noise_scale"]
    assert scale > 0 and advice["measure"]["parts"] == 8  # 2 minibatches from each of 4 shards
    assert [row["workers"] for row in advice["rows"]] == [1, 2, 4, 8, 16]
    assert advice["workers_worth"] == workers_worth(scaling_rows(scale, 16))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(("/no/such/store.zarr",), "does not exist"), (("--model", "no-such-model"), "unknown model")],
)
def test_advise_refuses_bad_input_in_one_line(
    args, fragment, digits_stores, run_cli, assert_one_line_error, capfd, tmp_path, monkeypatch
):
    monkeypatch.setenv("DANE_CACHE", str(tmp_path))
    store = () if args[0].startswith("/") else (str(digits_stores[2]),)
    status = run_cli(["advise", *store, *args])
    assert_one_line_error(status, capfd, [fragment])


def _row(round_index: int, scale: float | None, workers: int = 8) -> dict:
    return {"round": round_index, "noise_scale_ema": scale, "num_workers": workers}


def test_train_warns_once_when_a_step_holds_several_noise_scales():
    out = io.StringIO()
    lines = ProgressLines(Console(file=out))
    lines.batch_size = 32
    # round 1 is too early; 8 x 32 = 256 rows against 100: under 4x; then 256 vs 50: 5x
    for row in (_row(1, 10.0), _row(2, 100.0), _row(3, 50.0), _row(4, 20.0)):
        lines.warn(row)
    warned = out.getvalue().splitlines()
    assert len(warned) == 1 and "\n" not in warned[0]
    assert "256 rows a step" in warned[0] and "5x the gradient noise scale (50 rows)" in warned[0]


def test_no_warning_without_a_noise_scale_or_below_the_limit():
    assert noise_warning(_row(5, None), 32) is None  # fedavg: none measured
    limit = 8 * 32 / BATCH_OVER_NOISE
    assert noise_warning(_row(5, limit * (1 + 1e-9)), 32) is None
    assert noise_warning(_row(5, limit), 32) is not None
    assert math.isclose(BATCH_OVER_NOISE, 4.0)


def test_advise_measures_a_single_shard_store_after_sgd_steps(digits_stores):
    from dask_dane.pipeline.advise import advice_lines, advise
    from dask_dane.pipeline.setup.config import RunConfig

    config = RunConfig(store=str(digits_stores[1]), model="mlp", batch_size=16).validate()
    advice = advise(config, draws=2, steps=5)

    # one shard: its two disjoint minibatches a draw are the two batch sizes' parts
    assert advice["measure"]["parts"] == 2 and advice["measure"]["sgd_steps"] == 5
    assert "after 5 SGD steps" in advice_lines(advice)[0]


def test_advise_without_a_store_uses_the_embedded_default(dane_here, tmp_path):
    done = dane_here("advise", "--draws", "1", cwd=tmp_path, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert "digits-2shards-seed0.zarr, at the initial weights" in done.stdout
