"""`dane bench network`: real shaped links between network namespaces (root only), its budget
and projection arithmetic (anywhere)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from dask_dane.bench.common.specs import spec_of
from dask_dane.bench.network import faults
from dask_dane.bench.network.model import Network, dask_round_comm_s
from dask_dane.bench.network.netns import (
    NAMESPACE_PREFIX,
    NetnsUnavailable,
    check_can_run,
    leftovers,
    rate_bytes_per_s,
)
from dask_dane.bench.network.spec import NetworkSpec
from dask_dane.datasets.store import open_store

pytestmark = pytest.mark.bench


def _netns_reason() -> str | None:
    """Why the namespaced tests cannot run here, or None. Namespaces an earlier run left are
    no reason to skip: the tests then run and fail (test_no_namespaces_are_left_over says why),
    so that leftovers cannot silently turn them off."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return "network namespaces need root, ip and tc (CI runs as root)"
    if leftovers():
        return None
    try:
        check_can_run()
    except NetnsUnavailable as err:
        return str(err)
    return None


SKIP_REASON = _netns_reason()
needs_netns = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "")


def test_the_namespaced_tests_run_where_ci_requires_them():
    # .ci/run sets DANE_REQUIRE_NETNS=1 where it runs as root: skipping them there is a failure.
    if os.environ.get("DANE_REQUIRE_NETNS") == "1":
        assert SKIP_REASON is None, f"the namespaced tests would be skipped: {SKIP_REASON}"


@needs_netns
def test_no_namespaces_are_left_over():
    left = leftovers()
    assert not left, f"an earlier run left {left}; `dane bench network --cleanup` removes them"


def _namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _host_links() -> list[str]:
    listing = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return sorted(line.split(":")[1].strip() for line in listing.splitlines())


@pytest.mark.parametrize(
    ("text", "bytes_per_s"),
    [("1gbit", 125e6), ("100mbit", 12.5e6), ("10mbit", 1.25e6), ("1.5mbit", 187_500)],
)
def test_rates_read_as_tc_writes_them(text, bytes_per_s):
    assert rate_bytes_per_s(text) == pytest.approx(bytes_per_s)


@pytest.mark.parametrize("text", ["100", "fast", "0mbit", "-1gbit", "mbit"])
def test_a_rate_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="is not a rate like 1gbit"):
        rate_bytes_per_s(text)


def test_the_spec_refuses_unknown_methods_and_rates(digits_stores):
    store = str(digits_stores[2])
    with pytest.raises(ValueError, match="--methods takes"):
        spec_of(NetworkSpec, store=store, model="small-cnn", methods=("dane", "adam")).validate()
    with pytest.raises(ValueError, match="not a rate"):
        spec_of(NetworkSpec, store=store, model="small-cnn", bandwidths=("fast",)).validate()


def test_a_gradient_sample_is_given_to_dane_alone(digits_stores):
    spec = spec_of(
        NetworkSpec, store=str(digits_stores[2]), model="small-cnn", grad_sample=100
    ).validate()
    assert spec.dask_config("dane").grad_sample == 100
    assert spec.dask_config("fedavg").grad_sample == spec.dask_config("sgd").grad_sample == 0
    # DANE reads 100 gradient rows a shard and iteration, not the shard's 719.
    assert spec.images_budget() == 10 * 2 * (100 + 50 * 64)


def test_every_method_gets_the_images_of_n_dane_iterations(digits_stores):
    # Digits, 2 shards: DANE reads every shard row once for its gradient and K x B rows in
    # its solve, per iteration; FedAvg, SGD and DDP are given as many images.
    spec = spec_of(
        NetworkSpec, store=str(digits_stores[2]), model="small-cnn", rounds=3, local_steps=20
    )
    rows = open_store(digits_stores[2]).num_train  # 1438: 1797 less the 20 % test split
    assert rows == 1438
    budget = 3 * (rows + 2 * 20 * 64)
    assert spec.images_budget() == budget
    assert spec.dask_config("fedavg").rounds == -(-budget // (2 * 20 * 64))
    assert spec.dask_config("sgd").rounds == -(-budget // (2 * 64))
    assert spec.ddp_spec().epochs == pytest.approx(budget / rows)


def test_the_driver_state_is_on_the_projected_critical_path():
    # 10 Mbit/s, no latency, 2 workers, one phase of 1 MB: the weights out and back (2 MB),
    # one copy to the other worker (1 MB), one partial sum back (1 MB); then 2 MB of state.
    net = Network(bandwidth_gbps=0.01, latency_ms=0.0)
    plain = dask_round_comm_s(net, 2, [1_000_000], [1_000_000])
    assert plain == pytest.approx(4 * 0.8)
    assert dask_round_comm_s(net, 2, [1_000_000], [1_000_000], 2_000_000) == pytest.approx(6 * 0.8)


@needs_netns
@pytest.mark.cluster  # it starts `dane bench network` processes
def test_leftover_namespaces_are_refused_then_cleaned_up(digits_stores, tmp_path):
    leftover = f"{NAMESPACE_PREFIX}test{os.getpid()}-s"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    try:
        args = [sys.executable, "-m", "dask_dane.cli", "bench", "network"]
        done = subprocess.run(
            [*args, "--store", str(digits_stores[2]), "--model", "small-cnn",
             "--workdir", str(tmp_path / "w")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert leftover in done.stderr and "--cleanup" in done.stderr
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "w").exists()
        cleaned = subprocess.run([*args, "--cleanup"], capture_output=True, text=True, check=True)
        assert leftover in cleaned.stdout
        assert leftover not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "delete", leftover], capture_output=True)


@needs_netns
@pytest.mark.cluster
def test_a_small_namespaced_run_measures_every_method_and_leaves_nothing(
    digits_stores, tmp_path, monkeypatch
):
    from dask_dane.bench.network import bench
    from dask_dane.bench.network.bench import run_network

    # The idle cluster's control traffic (heartbeats, 2 a second a worker) listened to for
    # 3 s, not 10: a few % of the run's wire bytes, measured to well within the bounds below.
    listen = bench.idle_control_rate
    monkeypatch.setattr(bench, "idle_control_rate", lambda *a, **k: listen(*a, **k, seconds=3.0))
    namespaces, links = _namespaces(), _host_links()
    spec = spec_of(NetworkSpec,
        store=str(digits_stores[2]), model="small-cnn", workers=2, bandwidths=("100mbit",),
        methods=("dane", "ddp"), rounds=3, local_steps=10, workdir=str(tmp_path / "net"),
    )  # fmt: skip
    result = run_network(spec, log=lambda line: None)

    assert _namespaces() == namespaces and _host_links() == links
    runs = {run["method"]: run for run in result["runs"]}
    assert set(runs) == {"dane", "ddp"}
    assert runs["dane"]["rounds"] == 3 and runs["dane"]["final_test_accuracy"] > 0.5
    for run in runs.values():
        assert run["bandwidth"] == "100mbit" and run["exit_code"] == 0
        assert run["wire_bytes"] > run["comm_bytes"] > 0
        assert run["projected_s"] == pytest.approx(run["measured_s"], rel=0.5)
    # Every counted byte crossed a shaped link, in frames; little else did. gloo sends the
    # ring's chunks and nothing more (measured +3.4 %); Dask adds its task and heartbeat
    # messages, a few KB a round against a 153 KB model (+8 %).
    assert abs(runs["ddp"]["unexplained_fraction"]) < 0.10, runs["ddp"]
    assert abs(runs["dane"]["unexplained_fraction"]) < 0.20, runs["dane"]
    # 2 workers: the all-gather form, rounds chained on the cluster. The driver's node sent
    # the weights once (a broadcast scatter sends one copy, which the workers replicate
    # between them) and nothing model-sized besides (it sent 3 in the per-round form); what
    # came back is the new weights, one model a round (DANE keeps no driver state).
    assert runs["dane"]["broadcast"] == "dask"  # rows before 2026-12-07: "allgather"
    rows = runs["dane"]["round_figures"]
    model = rows[1]["driver_bytes"]  # round 2: the fetch alone
    assert rows[0]["driver_bytes"] == 3 * model  # the fetch, and the scatter to 2 workers
    driver_sent = runs["dane"]["wire_by_node"]["s"]
    assert model < driver_sent < 2 * model
    # The DANE run went through `dane train --scheduler` on the namespaced scheduler.
    driver_log = (tmp_path / "net" / "logs" / "dane-100mbit-auto" / "driver.log").read_text()
    assert "10.213.7.1:8787" in driver_log


@pytest.fixture(scope="module")
def faulted(digits_stores, tmp_path_factory) -> dict[str, dict]:
    """DANE on 2 namespaced workers at 100 Mbit/s: undisturbed, then under each fault, on
    one namespaced cluster; the runs by fault. The faults share one undisturbed run (each
    faulted run is compared with it), which CI's time counted once per test before."""
    tmp_path = tmp_path_factory.mktemp("faults")
    spec = spec_of(NetworkSpec,
        store=str(digits_stores[2]), model="small-cnn", workers=2, bandwidths=("100mbit",),
        methods=("dane",), rounds=FAULTED_ROUNDS, local_steps=40, workdir=str(tmp_path / "net"),
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        # The processes of the runs read it: see CONNECT_TIMEOUT.
        patch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", CONNECT_TIMEOUT)
        patch.setattr(faults, "WORKER_TTL_S", WORKER_TTL_S)
        patch.setattr(faults, "PARTITION_S", 1.5 * WORKER_TTL_S)  # the bench's ratio
        patch.setattr(faults, "COLLAPSE_RATE", COLLAPSE_RATE)
        result = faults.run_faults(spec, faults=("partition", "flap", "collapse"),
                                   log=lambda line: None)  # fmt: skip
    assert not [n for n in _namespaces() if n.startswith(NAMESPACE_PREFIX)]
    return {run["fault"]: run for run in result["runs"]}


# Rounds of the faulted runs: each fault lands half a round after round 1 (its warm-up: 3 or 4
# rounds later) and must find the run still going (fault_after_rounds), the partition for
# PARTITION_S. 7 leaves 3 or 4 rounds after it; each costs time, most when collapsed (2.5 s).
FAULTED_ROUNDS = 7
# The bench's faults, scaled down for time. The scheduler's heartbeat timeout: Dask's floor
# for 2 workers (10 heartbeats of 0.5 s; the bench takes 10 s); the partition lasts 1.5 of
# it, as the bench's does. The collapsed rate: a round takes ~1 s more at 5 Mbit/s than its
# 0.3-0.5 s undisturbed (2.7 s more at 2 Mbit/s, for the same check; the bench: 1 Mbit/s).
WORKER_TTL_S = 5.0
COLLAPSE_RATE = "5mbit"
# The partitioned run waits once for the scheduler's ask to the replaced worker's old address
# to time out: Dask's connect timeout, 30 s by default (30 s of that run's 69). Namespaced
# connections open in milliseconds; Dask retries one until it, past a flap's 1 s down.
CONNECT_TIMEOUT = "2s"


@needs_netns
@pytest.mark.cluster
def test_a_worker_partitioned_past_its_heartbeat_timeout_changes_no_weight(faulted):
    undisturbed, partitioned = faulted["none"], faulted["partition"]
    assert undisturbed["fault"] == "none" and undisturbed["exit_code"] == 0
    assert partitioned["fault"] == "partition"
    assert partitioned["exit_code"] == 0 or partitioned["resumed"]
    assert partitioned["weights_equal"], partitioned
    # The partition met the run: it landed mid-run, after round 1, and cost something. Every
    # round needs the cut-off worker's shard, so the run either lost the worker (its shard
    # reloaded elsewhere, or the round retried, or the cluster lost and resumed) or stalled
    # for the partition's length: at least the heartbeat timeout.
    assert partitioned["fault_landed_s"] is not None and partitioned["fault_after_rounds"] >= 1
    recovered = partitioned["shards_reloaded"] or partitioned["resumed"]
    retried = partitioned["attempts"] > partitioned["rounds"]
    assert recovered or retried or partitioned["cost_s"] >= WORKER_TTL_S, partitioned


@needs_netns
@pytest.mark.cluster
def test_flapping_and_collapsed_links_change_no_weight_and_cost_time(faulted):
    undisturbed = faulted["none"]
    assert undisturbed["fault"] == "none" and undisturbed["exit_code"] == 0
    assert list(faulted) == ["none", "partition", "flap", "collapse"]
    for run in (faulted["flap"], faulted["collapse"]):
        assert run["exit_code"] == 0 or run["resumed"], run
        assert run["weights_equal"], run
        assert run["fault_landed_s"] is not None and run["fault_after_rounds"] >= 1, run
        # A link down 1 s in 4, or every link at COLLAPSE_RATE, for the rest of the run: the
        # rounds after it landed move their weights more slowly than the same rounds
        # undisturbed. Counted on the rounds alone: the whole process's wall time also holds
        # a cluster's start, whose noise (measured -1.9 s once) can exceed a flap's cost.
        assert run["rounds_cost_s"] is not None and run["rounds_cost_s"] > 0, run


def _network_run(method: str, rate: str, measured: float, reached: float | None) -> dict:
    curve = [{"train_wall_s": t, "test_accuracy": a} for t, a in ((1.0, 0.5), (measured, 0.9))]
    return {
        "method": method, "bandwidth": rate, "broadcast": "direct", "measured_s": measured,
        "projected_s": 1.1 * measured, "time_to_target_s": reached, "wire_bytes": 3e6,
        "comm_bytes": 2e6, "driver_bytes": 1e6, "overhead_fraction": 0.5,
        "unexplained_fraction": -0.02, "final_test_accuracy": 0.9, "curve": curve,
    }  # fmt: skip


def test_the_network_report_has_a_row_and_a_line_per_run(monkeypatch, tmp_path):
    from dask_dane.bench.network import report as network_report
    from dask_dane.pipeline import report

    result = {
        "target": 0.88, "workers": 2,
        "runs": [_network_run("dane", "1gbit", 10.0, 8.0), _network_run("ddp", "1gbit", 20.0, None),
                 _network_run("dane", "10mbit", 40.0, 30.0)],
    }  # fmt: skip
    table = network_report.network_table(result).splitlines()
    figures: dict = {}
    monkeypatch.setattr(report, "save_figure", lambda fig, path: figures.update(fig=fig))
    network_report.network_plot(result, tmp_path / "net.png")

    assert "s to 88%" in table[0] and len(table) == 2 + 3
    assert table[2].startswith("| 1gbit | dane | 10.0 | 11.0 | +10.0 % | 8.0 | 3.00 | 2.00 |")
    assert "| not reached |" in table[3] and "| -2.0 % | 90.00 % |" in table[3]
    panels = figures["fig"].axes
    assert [ax.get_title() for ax in panels] == ["1gbit, 2 workers", "10mbit, 2 workers"]
    assert [len(ax.get_lines()) - 1 for ax in panels] == [2, 1]  # runs, less the target line
    assert list(panels[0].get_lines()[1].get_xdata()) == [1.0, 20.0]  # ddp's wall times
