"""`dane bench scaling` and the network projection: real runs on a small store, no timings
asserted (machines are shared): the byte accounting, the memory bound and the outputs."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from typer.testing import CliRunner

from dask_dane.bench.network.model import (
    Network,
    dask_round_comm_s,
    parse_network,
    ring_allreduce_s,
)
from dask_dane.cli.commands import app
from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store

pytestmark = pytest.mark.bench


@pytest.fixture(scope="module")
def scaling(tmp_path_factory):
    # lenet on 28x28 images, as the benchmark is meant for (small shards, few steps): the
    # memory bound allows 20 model copies, which for a tiny model would be less than the
    # few MiB a Dask worker process moves around on its own.
    out = tmp_path_factory.mktemp("scaling")
    raw = load_source("synthetic", SourceOptions(samples=600, image_size=28, seed=0))
    store = write_store(raw, PartitionSpec(num_shards=4, seed=0), out / "s.zarr", force=False)
    result = CliRunner().invoke(
        app,
        [
            "bench", "scaling", "--store", str(store.path), "--model", "lenet",
            "--shards", "4", "--workers", "1,2", "--rounds", "2", "--local-steps", "2",
            "--workdir", str(out / "work"), "--json", str(out / "s.json"),
            "--plot", str(out / "s.png"), "--network", "1,0.5",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((out / "s.json").read_text()), out


@pytest.mark.cluster
def test_dask_transfer_logs_agree_with_the_counted_bytes(scaling):
    result, _ = scaling
    for run in result["runs"]:
        for r in run["rounds"]:
            # Dask's own logs (worker-to-worker transfers, plus the driver's scatter as Dask
            # sizes it) against the pipeline's count: within 5 %.
            assert r["dask_bytes"] == pytest.approx(r["comm_bytes"], rel=0.05)
    one, two = result["runs"]
    model = result["model_bytes"]
    # The all-gather form, rounds chained: 1 worker moves nothing; 2 workers, DANE: each
    # worker's sum of its 2 shards to the other, in both phases (4 model-sized copies; the
    # per-round form moved 5, the weights' scatter among them).
    assert one["median"]["comm_bytes"] == 0
    assert two["median"]["comm_bytes"] == pytest.approx(4 * model, rel=0.01)
    # (The driver's own bytes are measured on a wire: test_bench_network.)


@pytest.mark.cluster
def test_memory_report_follows_the_bound_it_states(scaling):
    # Memory is measured by the benchmark (docs/results.md), not asserted against a machine's
    # numbers here: what a process holds beyond its data varies with the environment (the
    # same test measured 53 MiB above the bare worker on the development machine and 203 MiB
    # in a fresh CI checkout). What must hold anywhere is the accounting.
    result, _ = scaling
    model_mib = result["model_bytes"] / 2**20
    held_in_all = []
    for run in result["runs"]:
        assert len(run["memory"]) == run["workers"]
        # Each worker holds its shards and their pieces of the test split: every row once.
        held_in_all.append(sum(w["data_mib"] for w in run["memory"]))
        for worker in run["memory"]:
            assert worker["peak_mib"] >= worker["bare_mib"] > 50  # a real process with torch
            # The data bytes come from the store's row counts; Dask's own count of what the
            # worker held in the last round must cover them, plus no more than the model
            # copies of a round (weights, broadcasts, partial sums) and 1 MiB of small keys.
            held, data = worker["dask_held_mib"], worker["data_mib"]
            assert data <= held <= data + 20 * model_mib + 1, worker
        # Where the memory went, traced while the run trained: every round seen, the loads
        # before them, and nothing above the peak the kernel reports (give or take 1 MiB:
        # Linux updates the high-water mark behind ru_maxrss lazily).
        assert len(run["memory_trace"]) == run["workers"]
        for address, trace in run["memory_trace"].items():
            assert list(trace["max_by_round_mib"]) == ["1", "2", "3"]  # --rounds 2, + warm-up
            assert trace["start_mib"] <= trace["after_loads_mib"] <= trace["peak_mib"]
            peak = next(w["peak_mib"] for w in run["memory"] if w["worker"] == address)
            assert trace["peak_mib"] <= peak + 1
    assert max(held_in_all) == pytest.approx(min(held_in_all), abs=1e-9)


@pytest.mark.cluster
def test_outputs_reference_fixed_cost_and_projection(scaling):
    result, out = scaling
    assert (out / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "s.png").stat().st_size > 10_000
    # Speedup from two clocks: the bench's own round periods, and the wall times the driver
    # wrote in each run's metrics.jsonl (the same rounds: warm-up and last left out).
    medians = []
    for run in result["runs"]:
        rows = [json.loads(x) for x in (out / "work" / f"run-{run['workers']}" / "metrics.jsonl")
                .read_text().splitlines()][1:-1]  # fmt: skip
        medians.append(statistics.median(r["wall_s"] for r in rows))
        assert run["median"]["wall_s"] == pytest.approx(medians[-1], rel=0.25, abs=0.02)
    assert result["runs"][1]["speedup"] == pytest.approx(medians[0] / medians[1], rel=0.4)
    assert result["reference"]["median_s"] > 0
    assert result["overhead_ratio"] > 0
    assert [f["workers"] for f in result["fixed_cost"]] == [1, 2]
    assert result["fixed_cost"][0]["tasks_per_round"] == result["tasks_per_round"]
    # What limits the fixed cost, measured in the same run. 4 shards, DANE, rounds chained
    # on the cluster: one task per worker for the local gradients (each making the round
    # before's update inline), one for the local solves.
    one, two = result["fixed_cost"]
    assert (one["dependent_steps"], two["dependent_steps"]) == (2, 2)
    assert one["hop"]["same_worker_ms"] > 0 and "alternating_ms" not in one["hop"]
    assert two["hop"]["alternating_ms"] > 0
    for fixed in result["fixed_cost"]:
        timeline = fixed["timeline"]
        names = [t["task"] for t in timeline["timeline"]]
        # One task per worker and phase, and the update on every worker.
        workers = fixed["workers"]
        assert names.count("local_grad") == names.count("local_solve") == workers
        assert names.count("update") == workers and names[-1] == "update"
        assert "nodes_local_grad" not in names  # each worker keeps its gradients
        assert 0 < timeline["busy_ms"] <= timeline["task_ms"]
        assert timeline["busy_ms"] <= timeline["span_ms"] + 1e-6
    (network,) = result["projection"]["networks"]
    assert [r["workers"] for r in network["rounds"]] == [2, 4, 8, 16, 32, 64]
    assert all(r["round_s"] > 0 for r in network["rounds"])


def test_shard_count_mismatch_is_a_clean_error(digits_stores, tmp_path, dane_here):
    result = dane_here(
        "bench", "scaling", "--store", str(digits_stores[2]), "--model", "small-cnn",
        "--shards", "8", "--workdir", str(tmp_path / "work"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "holds 2 shards" in result.stderr and "--shards 8" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "work").exists()


def test_network_formulas():
    net = Network(bandwidth_gbps=1.0, latency_ms=0.5)
    assert net.send_s(125_000_000) == pytest.approx(1.0005)
    # Ring all-reduce of G bytes on W workers: 2 (W-1) latencies + 2 (W-1)/W G / B.
    assert ring_allreduce_s(net, 4, 1_000_000) == pytest.approx(6 * 5e-4 + 1.5 * 0.008)
    assert ring_allreduce_s(net, 1, 1_000_000) == 0.0
    # DANE on 4 workers, model of P bytes: scatter + gather by the driver, per phase
    # (W-1) copies from the reducing worker and a 2-level tree of partial sums.
    p = 1_000_000
    expected = 2 * net.send_s(p) + 2 * (5e-4 + 3 * p / net.bytes_per_s + 2 * net.send_s(p))
    assert dask_round_comm_s(net, 4, [p, p], [p, p]) == pytest.approx(expected)
    assert math.isclose(parse_network("10,0.05").bytes_per_s, 1.25e9)


@pytest.mark.parametrize("text", ["1", "a,b", "0,1", "1,-1"])
def test_bad_network_is_rejected_with_the_form(text):
    with pytest.raises(ValueError, match="--network"):
        parse_network(text)


@pytest.mark.cluster
def test_gpu_correctness_check_passes_on_the_cpu(tmp_path):
    # The comparison presets/scripts/gpu-check.sh runs on a GPU, here with the Dask run on the CPU.
    from dask_dane.bench.gpu.correctness import check

    result = check(tmp_path, device="cpu")
    assert result["verdict"] == "PASS", result["detail"]
    assert result["relative_error"] < 1e-9


def test_round_profile_counts_the_longest_chain_and_busy_time():
    from dask_dane.bench.scaling.profile import critical_path, round_timeline

    # a -> b -> d and a -> c -> d: three dependent steps; e, after d, is not counted.
    deps = {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c", "outside"}, "e": {"d"}}
    assert critical_path(deps, "d") == 3
    assert critical_path(deps, "e") == 4

    def record(key, worker, start, stop):
        return {"key": key, "worker": worker,
                "startstops": [{"action": "compute", "start": start, "stop": stop}]}  # fmt: skip

    stream = [
        record("local_grad-2-0-tok", "w0", 10.000, 10.004),
        record("local_grad-2-1-tok", "w1", 10.002, 10.006),  # overlaps the first
        record("update-2-tok", "w0", 10.010, 10.011),
        record("load_shard-2-tok", "w0", 9.0, 9.5),  # a shard index, not a round
        record("update-3-tok", "w0", 11.0, 11.1),  # another round
    ]
    timeline = round_timeline(stream, 2)
    assert timeline["tasks"] == 3
    assert timeline["span_ms"] == pytest.approx(11.0)
    assert timeline["task_ms"] == pytest.approx(9.0)
    assert timeline["busy_ms"] == pytest.approx(7.0)  # 0-6 ms and 10-11 ms
    assert [t["worker"] for t in timeline["timeline"]] == [0, 1, 0]


def test_memory_trace_summary_tells_loads_first_task_and_rounds_apart():
    from dask_dane.bench.scaling.memory import trace_summary

    mib = 2**20
    samples = [
        (0.0, 100 * mib, []),
        (0.1, 150 * mib, ["load_shard-7-tok"]),  # shard 7, not round 7
        (0.2, 160 * mib, ["load_test-tok"]),
        (0.3, 200 * mib, ["local_grad-1-0-tok"]),
        (0.4, 230 * mib, ["local_grad-1-0-tok"]),
        (0.5, 240 * mib, ["local_grad-1-1-tok"]),
        (0.6, 235 * mib, ["update-2-tok"]),
        (0.7, 250 * mib, []),
    ]
    summary = trace_summary(samples)
    assert summary["start_mib"] == 100
    assert summary["after_loads_mib"] == 160
    assert summary["first_round_task_mib"] == 230
    assert summary["max_by_round_mib"] == {"1": 240, "2": 235}
    assert summary["peak_mib"] == 250
