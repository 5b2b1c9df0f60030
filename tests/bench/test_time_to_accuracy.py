"""`dane bench time-to-accuracy`: projections from a shards sweep, checked against the
alpha-beta formulas written out by hand here (not through bench/network/model.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

from dask_dane.bench.network.model import Network
from dask_dane.bench.scaling.time_methods import fixed_cost_from
from dask_dane.bench.scaling.time_to_accuracy import crossing, project_sweep

PAYLOAD = 2_000_000  # bytes of one model copy
GRAD = 1_800_000  # DDP's all-reduced bytes
COPIES = {1: 1, 2: 5}  # model copies a DANE round moves on 1 and 2 workers (comm.py)


def _dane_run(m: int, accuracies: list[float], compute: float) -> dict:
    workers = min(m, 2)
    rounds = len(accuracies)
    return {
        "shards": m,
        "config": {"algorithm": "dane", "model": "compact-cnn", "batch_size": 64},
        "curve": [{"round": r + 1, "test_accuracy": a} for r, a in enumerate(accuracies)],
        "timing": {
            "workers": workers,
            "phases": 2,
            "round_compute_s": [compute] * rounds,
            "round_train_s": [compute + 0.2 + r for r in range(rounds)],
            "comm_bytes": [PAYLOAD * COPIES[workers]] * rounds,
        },
    }


def _ddp_run(m: int, steps_to_88: int | None) -> dict:
    curve = [{"step": 0, "test_accuracy": 0.1}, {"step": 500, "test_accuracy": 0.85}]
    if steps_to_88:
        curve.append({"step": steps_to_88, "test_accuracy": 0.885})
    return {"shards": m, "curve": curve, "grad_bytes": GRAD}


# One rank's step, as `dane bench single --threads 1 --batch-size 64` reports it: 0.01 s.
SINGLE = {"spec": {"model": "compact-cnn", "batch_size": 64}, "threads": 1, "steps": 200,
          "train_wall_s": 2.0}  # fmt: skip


@pytest.fixture()
def sweep() -> dict:
    return {  # the DANE rows; DDP's in a second JSON, run apart (`--no-dane`)
        "spec": {},
        "runs": [
            _dane_run(1, [0.80, 0.87, 0.89, 0.92], compute=40.0),
            _dane_run(2, [0.78, 0.86, 0.88, 0.90], compute=20.0),
            _dane_run(4, [0.75, 0.85, 0.87, 0.881], compute=20.0),
        ],
    }


@pytest.fixture()
def ddp_sweep() -> dict:
    return {
        "spec": {},
        "runs": [],
        "ddp_runs": [_ddp_run(1, 2000), _ddp_run(2, 1200), _ddp_run(4, None)],
    }


def _fixed_row(workers: int, ms: float, steps: int, hop: dict) -> dict:
    return {"workers": workers, "ms_per_round": ms, "dependent_steps": steps, "hop": hop}


@pytest.fixture()
def scaling() -> dict:
    return {
        "machine": {"cpu_count": 2},
        "phases": 2,
        "fixed_cost": [
            _fixed_row(1, 100.0, 7, {"same_worker_ms": 6.0}),
            _fixed_row(2, 120.0, 9, {"same_worker_ms": 6.0, "alternating_ms": 8.0}),
            _fixed_row(4, 300.0, 11, {"same_worker_ms": 9.0, "alternating_ms": 30.0}),
        ],
    }


NET = Network(bandwidth_gbps=10.0, latency_ms=0.05)


def _by_hand_dane_round(m: int, compute_on_w0: float, w0: int, fixed: float) -> float:
    """One DANE round on m workers: the driver's scatter and gather, then per phase the
    reducing worker sends m - 1 copies (one latency) and the sums climb log2(m) levels."""
    a, per_byte = 50e-6, 8 / 10e9
    depth = {1: 0, 2: 1, 4: 2}[m]
    per_phase = (a + (m - 1) * PAYLOAD * per_byte if m > 1 else 0.0) + depth * (
        a + PAYLOAD * per_byte
    )
    comm = 2 * (a + PAYLOAD * per_byte) + 2 * per_phase
    return compute_on_w0 * w0 / m + fixed + comm


def test_fixed_cost_uses_the_measured_rows_and_adds_a_step_per_phase_per_tree_level(scaling):
    fixed = fixed_cost_from(scaling)

    # 4 workers on 2 cores were oversubscribed: left out, extrapolated from 2 instead.
    assert fixed.measured_s == {1: 0.1, 2: 0.12}
    assert fixed.steps_per_level == 2 and fixed.step_s == pytest.approx(0.008)
    assert fixed.seconds(4) == pytest.approx(0.12 + 2 * 1 * 0.008)
    assert fixed.seconds(32) == pytest.approx(0.12 + 2 * 4 * 0.008)
    with pytest.raises(ValueError, match="no fixed_cost rows"):
        fixed_cost_from({"fixed_cost": []})


def _project(sweep: dict, ddp_sweep: dict, scaling: dict, **options) -> dict:
    return project_sweep([sweep, ddp_sweep], scaling, ddp_step=SINGLE, networks=(NET,), **options)


def test_projected_times_and_speedups_follow_the_formulas(sweep, ddp_sweep, scaling):
    result = _project(sweep, ddp_sweep, scaling, targets=(0.88,), speedups=(1.0, 100.0))

    tables = {t["compute_speedup"]: t["methods"] for t in result["projections"]}
    fixed = {1: 0.1, 2: 0.12, 4: 0.136}
    w0 = {1: 1, 2: 2, 4: 2}
    compute = {1: 40.0, 2: 20.0, 4: 20.0}
    iterations = {1: 3, 2: 3, 4: 4}
    for speed, methods in tables.items():
        dane = {r["shards"]: r for r in methods["dane"]}
        for m in (1, 2, 4):
            round_s = _by_hand_dane_round(m, compute[m] / speed, w0[m], fixed[m])
            assert dane[m]["time_s"] == pytest.approx(iterations[m] * round_s, rel=1e-9)
            assert dane[m]["speedup"] == pytest.approx(dane[1]["time_s"] / dane[m]["time_s"])
        ddp = {r["shards"]: r for r in methods["ddp"]}
        ring = 2 * 1 * 50e-6 + 2 * 1 / 2 * GRAD * 8 / 10e9  # two ranks
        assert ddp[1]["time_s"] == pytest.approx(2000 * 0.01 / speed)
        assert ddp[2]["time_s"] == pytest.approx(1200 * (0.01 / speed + ring))
        assert ddp[4]["time_s"] is None and ddp[4]["speedup"] is None  # never reached 88 %


@pytest.mark.parametrize("label", ["dask", "allgather"])  # allgather: rows before 2026-12-07
def test_the_allgather_form_keeps_its_fixed_cost_and_sends_w_minus_1_copies_a_phase(
    sweep, ddp_sweep, scaling, label
):
    # A fixed-cost JSON of the all-gather form (rounds chained on the cluster): its
    # dependent steps do not grow with W; each worker sends its sum to the W - 1 others.
    for row in scaling["fixed_cost"]:
        row["round_form"] = label
    fixed = fixed_cost_from(scaling)
    assert fixed.form == label
    assert fixed.seconds(4) == fixed.seconds(32) == pytest.approx(0.12)

    result = _project(sweep, ddp_sweep, scaling, targets=(0.88,), speedups=(1.0,))

    (table,) = result["projections"]
    dane = {r["shards"]: r for r in table["methods"]["dane"]}
    a, per_byte = 50e-6, 8 / 10e9
    for m, (compute, w0, fixed_s, iterations) in {
        1: (40.0, 1, 0.1, 3), 2: (20.0, 2, 0.12, 3), 4: (20.0, 2, 0.12, 4)
    }.items():  # fmt: skip
        per_phase = a + (m - 1) * PAYLOAD * per_byte if m > 1 else 0.0
        round_s = compute * w0 / m + fixed_s + 2 * per_phase  # no scatter, no tree levels
        assert dane[m]["time_s"] == pytest.approx(iterations * round_s, rel=1e-9)


def test_the_crossover_is_where_both_times_are_equal_and_the_order_flips_there(
    sweep, ddp_sweep, scaling
):
    result = _project(sweep, ddp_sweep, scaling, targets=(0.88,), speedups=(1.0,))
    fixed = fixed_cost_from(scaling)
    from dask_dane.bench.scaling.time_methods import dask_methods, ddp_methods

    dane = {m.shards: m for m in dask_methods(sweep["runs"], "dane")}[2]
    ddp = {m.shards: m for m in ddp_methods(ddp_sweep["ddp_runs"], 0.01)}[2]
    row = next(r for r in result["crossover"] if r["shards"] == 2)
    assert row["dane_first"] in ("below", "above")
    at = row["bandwidth_gbps"]

    def gap(bandwidth: float) -> float:  # DANE's time less DDP's
        net = Network(bandwidth_gbps=bandwidth, latency_ms=0.05)
        return dane.time_s(0.88, net, 1.0, fixed) - ddp.time_s(0.88, net, 1.0, fixed)

    assert gap(at) == pytest.approx(0.0, abs=1e-6 * dane.time_s(0.88, NET, 1.0, fixed))
    below, above = gap(at / 2), gap(at * 2)
    assert (below < 0 < above) if row["dane_first"] == "below" else (above < 0 < below)
    # DDP never reaches 88 % at 4 ranks: DANE is first at every bandwidth.
    four = next(r for r in result["crossover"] if r["shards"] == 4)
    assert four == {**four, "dane_first": "always", "bandwidth_gbps": None}
    assert crossing(dane, dane, 0.88, 1.0, fixed)["dane_first"] == "never"  # a tie is no win


def test_the_loopback_check_sums_the_measured_rounds_where_each_worker_held_one_shard(
    sweep, scaling, monkeypatch
):
    # The loopback measured as NET, so the projection is the by-hand round's; the error is
    # then checked against numbers none of which the row itself supplies.
    monkeypatch.setattr("dask_dane.bench.scaling.time_to_accuracy.measure_loopback", lambda: NET)

    result = project_sweep([sweep], scaling, targets=(0.88, 0.91), networks=(NET,))

    checks = {(r["shards"], r["target"]): r for r in result["loopback_check"]}
    # m = 4 ran on 2 workers (not one shard per worker); m = 2 never reached 91 %.
    assert set(checks) == {(1, 0.88), (1, 0.91), (2, 0.88)}
    one = checks[(1, 0.91)]
    measured = 40.2 + 41.2 + 42.2 + 43.2  # round_train_s of rounds 1-4: compute + 0.2 + r
    projected = 4 * _by_hand_dane_round(1, 40.0, 1, 0.1)
    assert one["iterations"] == 4
    assert one["measured_s"] == pytest.approx(measured, rel=1e-12)
    assert one["projected_s"] == pytest.approx(projected, rel=1e-9)
    assert one["error_pct"] == pytest.approx(100 * (projected - measured) / measured, rel=1e-9)
    two = checks[(2, 0.88)]  # 3 rounds of 20 s on 2 workers: the tree and the driver's copies
    assert two["projected_s"] == pytest.approx(3 * _by_hand_dane_round(2, 20.0, 2, 0.12))
    assert two["error_pct"] == pytest.approx(100 * (two["projected_s"] / (3 * 20.2 + 3) - 1))
    assert result["crossover"] == []  # no DDP rows given


def test_inputs_that_cannot_be_projected_are_refused_by_name(sweep, ddp_sweep, scaling):
    with pytest.raises(ValueError, match="pass --ddp-step"):
        project_sweep([sweep, ddp_sweep], scaling, networks=(NET,))
    two_threads = {**SINGLE, "threads": 2}
    with pytest.raises(ValueError, match="--threads 1 and --batch-size 64"):
        project_sweep([sweep, ddp_sweep], scaling, ddp_step=two_threads, networks=(NET,))
    with pytest.raises(ValueError, match="runs for the same m twice"):
        project_sweep([sweep, sweep], scaling, networks=(NET,))
    with pytest.raises(ValueError, match="not a `dane bench shards` result"):
        project_sweep([scaling], scaling, networks=(NET,))
    with pytest.raises(ValueError, match="configuration's own rows"):
        project_sweep([ddp_sweep], scaling, ddp_step=SINGLE, networks=(NET,))


def test_the_command_writes_tables_and_a_figure_and_refuses_an_old_sweep(
    sweep, ddp_sweep, scaling, dane_here, tmp_path
):
    shards, ddp, fixed = tmp_path / "shards.json", tmp_path / "ddp.json", tmp_path / "scaling.json"
    single = tmp_path / "single.json"
    for path, content in ((shards, sweep), (ddp, ddp_sweep), (fixed, scaling), (single, SINGLE)):
        path.write_text(json.dumps(content))
    out, png = tmp_path / "tta.json", tmp_path / "tta.png"

    def dane(*args: str) -> subprocess.CompletedProcess:
        return dane_here("bench", "time-to-accuracy", *args, cwd=tmp_path)

    inputs = [str(shards), str(ddp), "--fixed-cost", str(fixed), "--ddp-step", str(single)]
    done = dane(*inputs, "--json", str(out), "--plot", str(png))
    assert done.returncode == 0, done.stderr
    assert (
        "Time to 88% on 10 Gbit/s" in done.stdout and "reaches the target before DDP" in done.stdout
    )
    assert len(json.loads(out.read_text())["projections"]) == 2 * 2 * 3  # targets, nets, speeds
    assert png.stat().st_size > 10_000

    del sweep["runs"][0]["timing"]
    shards.write_text(json.dumps(sweep))
    refused = dane(*inputs, "--json", str(tmp_path / "x.json"))
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "per-round timing" in refused.stderr
    assert not (tmp_path / "x.json").exists()
