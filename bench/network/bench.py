"""`dane bench network`: dask-dane, DDP, SGD and FedAvg on real shaped links, side by side.

For each bandwidth (slowest last) every method runs once on the same NetnsCluster, from the
same store, model and initial weights (network_spec.py sets the budgets). Per run: training
wall time (evaluation excluded, as in `dane bench ddp`), the bytes the nodes put on their
links against the pipeline's own count (`comm_bytes`), the time to `--target`, and the time
`network.py`'s model predicts for the run from its own compute, rounds and bytes.

The projection needs one figure the shaped runs cannot give: a round's fixed cost (driver and
scheduler work), which on a slow link hides inside the communication. Each dask-dane method
therefore first runs CALIBRATION_ROUNDS rounds on the same namespaces with the links
unshaped, with its graph unchanged but as little compute as it allows (2 local steps, 256
gradient rows); its median fixed cost per round is the model's `fixed_s` for that method.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...pipeline.engine.run.rundir import RunDir
from ..common.specs import spec_record
from ..ddp.compare import dask_curve, ddp_method, targets_reached
from ..ddp.projection import model_copies
from . import probe as allreduce_probe
from .model import (
    ALLGATHER_FORMS,
    Network,
    project_allgather_round_s,
    project_dask_round_s,
    ring_allreduce_s,
)
from .netns import NetnsCluster, check_can_run, rate_bytes_per_s
from .runs import RunFailed, idle_control_rate, run_dask, run_ddp_ranks
from .spec import NetworkSpec

# A run's first rounds pay for connections and first calls: the median is taken after them.
CALIBRATION_ROUNDS, CALIBRATION_WARMUP = 10, 2
ROUND_FIGURES = ("round_form", "wall_s", "eval_s", "max_worker_compute_s", "comm_bytes",
                 "driver_bytes", "comm_rounds")  # fmt: skip
# Headers of a full TCP/IPv4 frame at MTU 1500: 14 Ethernet + 20 IP + 32 TCP (timestamps) bytes
# around 1448 of payload. The qdisc counts them; preamble, gap and checksum it does not.
FRAME_OVERHEAD = (14 + 20 + 32) / 1448


class _Terminated(Exception):
    """SIGTERM, turned into an exception so that the namespaces are removed on the way out."""


def _on_sigterm(*_: object) -> None:
    raise _Terminated


def run_network(spec: NetworkSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every method on every bandwidth; returns the JSON-able result (runs, calibration)."""
    spec = spec.validate()
    check_can_run()
    shutil.rmtree(spec.workdir, ignore_errors=True)
    work = Path(spec.workdir)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with NetnsCluster(workers=spec.run.workers) as cluster:
            fixed = _calibrate(cluster, spec, work, log)
            cluster.shape(spec.bandwidths[0])
            idle = idle_control_rate(cluster, work / "logs" / "idle", timeout=spec.run.timeout)
            runs = [
                _one_run(
                    cluster, spec, (method, mode), rate, (fixed.get(method, 0.0), idle), work, log
                )
                for rate in spec.bandwidths
                for method in spec.all_methods()
                for mode in (spec.broadcasts if method != "ddp" else ("",))
            ]
    except _Terminated:
        raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return {
        "spec": {**spec_record(spec), "bandwidths": list(spec.bandwidths)},
        "workers": spec.run.workers,
        "target": spec.target,
        "images_budget": spec.images_budget(),
        "calibration": {
            "rounds": CALIBRATION_ROUNDS,
            "fixed_s_per_round": fixed,
            "idle_control_bytes_per_s": idle,
        },
        "runs": runs,
    }


def _calibrate(
    cluster: NetnsCluster, spec: NetworkSpec, work: Path, log: Callable[[str], None]
) -> dict[str, float]:
    """Each dask-dane method's fixed cost per round, on unshaped links (see module doc)."""
    fixed = {}
    for method in spec.dask_methods():
        log(f"calibrating {method} on unshaped links ...")
        config = spec.dask_config(method, rounds=CALIBRATION_ROUNDS)
        run = run_dask(
            cluster, config, work / "logs" / f"{method}-calibration", timeout=spec.run.timeout
        )
        rows = RunDir(Path(config.out)).rows()
        if run["exit_code"] != 0 or not rows:
            raise RunFailed(f"calibration run of {method} failed: {run['driver_last_line']}")
        fixed[method] = statistics.median(
            r["wall_s"] - (r.get("eval_s") or 0.0) - r["max_worker_compute_s"]
            for r in rows[CALIBRATION_WARMUP:]
        )
    return fixed


def _one_run(
    cluster: NetnsCluster,
    spec: NetworkSpec,
    run_of: tuple[str, str],
    rate: str,
    calibrated: tuple[float, float],
    work: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Method `run_of[0]` (broadcast `run_of[1]`, dask-dane only) at `rate`: one row."""
    method, mode = run_of
    fixed_s, idle_rate = calibrated
    log(f"{method}{f' ({mode} broadcast)' if mode else ''} at {rate} ...")
    cluster.shape(rate)
    # The link's rate counts frames, headers included: tensors go FRAME_OVERHEAD slower.
    payload_rate = rate_bytes_per_s(rate) / (1 + FRAME_OVERHEAD)
    net = Network(bandwidth_gbps=payload_rate * 8 / 1e9, latency_ms=spec.latency_ms)
    logs = work / "logs" / f"{method}-{rate}{f'-{mode}' if mode else ''}"
    if method == "ddp":
        ddp = run_ddp_ranks(cluster, spec.ddp_spec(), logs)
        allreduce_s = allreduce_probe.measure(cluster, ddp["model_params"])
        row = _ddp_row(ddp, spec, net, allreduce_s)
    else:
        # torch: the run's rounds through a gloo group (--collective torch); the others name
        # the Dask graph's collective (--broadcast), as before --collective existed.
        form = (
            {"collective": "torch"}
            if mode == "torch"
            else {"collective": "dask", "broadcast": mode}
        )
        config = replace(spec.dask_config(method), **form)
        if len(spec.broadcasts) > 1:
            config = replace(config, out=f"{config.out}-{mode}")
        shutil.rmtree(config.out, ignore_errors=True)
        run = run_dask(cluster, config, logs, timeout=spec.run.timeout)
        row = _dask_row(run, Path(config.out), spec, net, fixed_s)
    row = {"method": method, "bandwidth": rate, **row}
    counted = row["comm_bytes"] + row["driver_bytes"]
    row["overhead_fraction"] = (
        row["wire_bytes"] / row["comm_bytes"] - 1 if row["comm_bytes"] else None
    )
    # What the wire should carry: the counted tensors in TCP/IP frames, and for Dask its idle
    # control traffic (heartbeats) over the run's wall time; the rest is per-round messages.
    control = idle_rate * row["process_wall_s"] if method != "ddp" else 0.0
    row["expected_wire_bytes"] = counted * (1 + FRAME_OVERHEAD) + control
    row["unexplained_fraction"] = (
        row["wire_bytes"] / row["expected_wire_bytes"] - 1 if counted else None
    )
    log(_line(row))
    return row


def _dask_row(
    run: dict[str, Any], out: Path, spec: NetworkSpec, net: Network, fixed_s: float
) -> dict[str, Any]:
    rows = RunDir(out).rows()
    # The collective the run's rounds took, as its rows say (--broadcast chose it).
    form = rows[0].get("round_form", "direct") if rows else "direct"
    curve = dask_curve(rows)
    targets = targets_reached(curve, (spec.target or 1.0,))
    return {
        "exit_code": run["exit_code"],
        "error": None if run["exit_code"] == 0 else run["driver_last_line"],
        "process_wall_s": run["process_wall_s"],
        "rounds": len(rows),
        "measured_s": curve[-1]["train_wall_s"] if curve else 0.0,
        "projected_s": _project_dask(rows, spec.run.workers, net, fixed_s, form),
        "broadcast": form,
        # Equal across --broadcast modes: the form changes where bytes go, not one bit.
        "weights_sha256": _weights_hash(out) if rows else None,
        "wire_bytes": run["wire"]["bytes"],
        "wire_by_node": run["wire"]["by_node"],
        "comm_bytes": rows[-1]["cum_comm_bytes"] if rows else 0,
        "driver_bytes": sum(r.get("driver_bytes", 0) for r in rows),
        "time_to_target_s": targets["time_to_target_s"] if spec.target else None,
        "final_test_accuracy": targets["final_test_accuracy"],
        "best_test_accuracy": targets["best_test_accuracy"],
        "images": rows[-1]["cum_images"] if rows else 0,
        "curve": curve,
        # What the projection reads, per round: enough to project the run again offline.
        "round_figures": [{k: r.get(k) for k in ROUND_FIGURES} for r in rows],
    }


def _weights_hash(out: Path) -> str:
    weights = RunDir(out).final_weights()
    return hashlib.sha256(weights.numpy().tobytes()).hexdigest()


def _project_dask(
    rows: list[dict[str, Any]], workers: int, net: Network, fixed_s: float, form: str
) -> float:
    """network.py's round time, summed over the run's rounds, from each round's own measured
    compute and bytes and the method's calibrated fixed cost, in the run's form."""
    total, before = 0.0, 0
    for r in rows:
        phases, before = r["comm_rounds"] - before, r["comm_rounds"]  # the row's is cumulative
        if form in ALLGATHER_FORMS:  # one subtree sum a worker (a shard a worker, or blocks)
            payload = r["comm_bytes"] / max(1, phases * workers * (workers - 1))
            total += project_allgather_round_s(
                net, compute_s=r["max_worker_compute_s"], fixed_s=fixed_s, workers=workers,
                phase_outputs=[payload] * phases, driver_bytes=r.get("driver_bytes", 0),
            )  # fmt: skip
            continue
        payload = r["comm_bytes"] / model_copies(phases, workers)
        total += project_dask_round_s(
            net, workers=workers, measured_workers=workers, compute_s=r["max_worker_compute_s"],
            fixed_s=fixed_s, phase_inputs=[payload] * phases, phase_outputs=[payload] * phases,
            driver_extra=max(0, int(r.get("driver_bytes", 0) - payload)), tree=form == "tree",
        )  # fmt: skip
    return total


def _ddp_row(
    ddp: dict[str, Any], spec: NetworkSpec, net: Network, allreduce_s: float
) -> dict[str, Any]:
    """The DDP run's row. Projected: its own compute per step plus gloo's all-reduce as the
    probe measured it on this link (allreduce_probe.py says why not bytes / rate)."""
    method = ddp_method(ddp, spec.run.batch_size * spec.run.workers, (spec.target or 1.0,))
    steps = ddp["steps"]
    ring_s = ring_allreduce_s(net, spec.run.workers, ddp["model_bytes"])
    return {
        "allreduce_probe_s": allreduce_s,
        "allreduce_ring_model_s": ring_s,
        "projected_ring_model_s": steps * (method["round_compute_s"] + ring_s),
        "exit_code": 0,
        "error": None,
        "process_wall_s": ddp["process_wall_s"],
        "rounds": steps,
        "measured_s": ddp["train_wall_s"],
        "projected_s": steps * (method["round_compute_s"] + allreduce_s),
        "wire_bytes": ddp["wire"]["bytes"],
        "wire_by_node": ddp["wire"]["by_node"],
        "comm_bytes": steps * ddp["bytes_per_step_total"],
        "driver_bytes": 0,  # no driver: the ranks hold the run
        "time_to_target_s": method["time_to_target_s"] if spec.target else None,
        "final_test_accuracy": method["final_test_accuracy"],
        "best_test_accuracy": method["best_test_accuracy"],
        "images": steps * spec.run.batch_size * spec.run.workers,
        "curve": method["curve"],
    }


def _line(row: dict[str, Any]) -> str:
    target = row["time_to_target_s"]
    return (
        f"  {row['method']} at {row['bandwidth']}: {row['measured_s']:.1f} s measured, "
        f"{row['projected_s']:.1f} s projected, {row['wire_bytes'] / 1e6:.1f} MB on the wire "
        f"({row['comm_bytes'] / 1e6:.1f} MB counted), final accuracy "
        f"{(row['final_test_accuracy'] or 0) * 100:.2f} %"
        + (f", target at {target:.1f} s" if target is not None else "")
    )
