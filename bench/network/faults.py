"""`dane bench network --faults`: a DANE run against faults of the wire, not of processes.

On the shaped cluster, one undisturbed run, then the same run under each fault, injected
while a round is in flight (half a round after the first one ended):

- partition: worker w1's link goes down for longer than the scheduler's worker TTL (its
  heartbeat timeout), then comes back; the scheduler gives the worker up, its shard is
  reloaded from the store on another worker and the round is rerun;
- flap: w1's link goes down for FLAP_DOWN_S every FLAP_PERIOD_S until the run ends;
- collapse: every link drops to COLLAPSE_RATE for the rest of the run.

Each run must end with weights `torch.equal` to the undisturbed run's, or stop with exit 4
(the cluster lost, within --timeout) and then, resumed on a fresh scheduler and workers, end
with them. The cost of a fault is its run's wall time less the undisturbed run's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ...pipeline.engine.run.metrics import read_metrics
from ...pipeline.engine.run.rundir import RunDir
from ...pipeline.setup.config import RunConfig
from .netns import NetnsCluster, check_can_run
from .runs import run_dask
from .spec import NetworkSpec

FAULTS = ("partition", "flap", "collapse")
WORKER_TTL_S = 10.0  # the scheduler's heartbeat timeout in these runs (Dask's default: 300)
PARTITION_S = 1.5 * WORKER_TTL_S
FLAP_DOWN_S, FLAP_PERIOD_S = 1.0, 4.0
COLLAPSE_RATE = "1mbit"
EXIT_CLUSTER_LOST = 4


def run_faults(
    spec: NetworkSpec, faults: tuple[str, ...] = FAULTS, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The undisturbed run and one run per fault, at spec.bandwidths[0]; JSON-able."""
    spec = spec.validate()
    check_can_run()
    rate = spec.bandwidths[0]
    work = Path(spec.workdir) / "faults"
    method = next(iter(spec.dask_methods()))
    runs = []
    with NetnsCluster(workers=spec.run.workers) as cluster:
        for fault in ("none", *faults):
            cluster.shape(rate)
            log(f"{method} at {rate}, fault: {fault} ...")
            config = replace(spec.dask_config(method), out=str(work / fault), stop_at_accuracy=0.0)
            logs = work / "logs" / fault
            runs.append(_faulted_run(cluster, config, fault, logs, spec.run.timeout))
    baseline = runs[0]
    for run in runs:
        run["weights_equal"] = torch.equal(run.pop("weights"), baseline["weights_ref"])
        run["cost_s"] = run["process_wall_s"] - baseline["process_wall_s"]
        run["rounds_cost_s"] = _rounds_cost(run, baseline)
        log(f"  {run['fault']}: exit {run['exit_code']}, resumed {run['resumed']}, weights equal "
            f"{run['weights_equal']}, cost {run['cost_s']:+.1f} s")  # fmt: skip
    baseline.pop("weights_ref")
    for run in runs:
        run.pop("round_walls")
    return {"bandwidth": rate, "method": method, "worker_ttl_s": WORKER_TTL_S, "runs": runs}


def _rounds_cost(run: dict[str, Any], baseline: dict[str, Any]) -> float | None:
    """Seconds the rounds after the fault landed took beyond the same rounds undisturbed;
    None when the fault never landed or a resume renumbered nothing comparable."""
    after = run["fault_after_rounds"]
    if after is None or len(run["round_walls"]) != len(baseline["round_walls"]):
        return None
    return sum(run["round_walls"][after:]) - sum(baseline["round_walls"][after:])


def _faulted_run(
    cluster: NetnsCluster, config: RunConfig, fault: str, logs: Path, timeout: float
) -> dict[str, Any]:
    stop, landed = threading.Event(), {}
    injector = threading.Thread(
        target=_inject, args=(cluster, fault, config, stop, landed), daemon=True
    )
    started = time.monotonic()
    injector.start()
    try:
        run = run_dask(cluster, config, logs, timeout=timeout, worker_ttl_s=WORKER_TTL_S)
    finally:
        stop.set()
        injector.join()
        _heal(cluster)
    resumed = run["exit_code"] == EXIT_CLUSTER_LOST
    wall = run["process_wall_s"]
    if resumed:  # a fresh scheduler and workers, as a user would start them
        again = run_dask(cluster, config, logs / "resume", timeout=timeout,
                         worker_ttl_s=WORKER_TTL_S, resume=True)  # fmt: skip
        wall += again["process_wall_s"]
        run = {**again, "first_exit_code": run["exit_code"]}
    rows = RunDir(Path(config.out)).rows()
    weights = RunDir(Path(config.out)).final_weights()
    return {
        "fault": fault,
        "exit_code": run["exit_code"],
        "resumed": resumed,
        "rounds": len(rows),
        "attempts": sum(r.get("attempts", 1) for r in rows),
        "shards_reloaded": sum(r.get("shards_reloaded", 0) for r in rows),
        "process_wall_s": wall,
        "round_walls": [row["wall_s"] for row in rows],
        # When the fault landed (s after the run started; None: the run ended first) and
        # how many rounds had ended then: proof that the run met it.
        "fault_landed_s": landed["at"] - started if "at" in landed else None,
        "fault_after_rounds": landed.get("rounds"),
        "driver_last_line": run["driver_last_line"],
        "weights": weights,
        **({"weights_ref": weights} if fault == "none" else {}),
    }


def _inject(
    cluster: NetnsCluster, fault: str, config: RunConfig, stop: threading.Event, landed: dict
) -> None:
    """Wait until round 1 has ended and half a round more, then apply `fault` (see module);
    `landed` records when it did and after how many rounds."""
    if fault == "none":
        return
    metrics = RunDir(Path(config.out)).metrics
    while not stop.is_set() and not read_metrics(metrics):
        time.sleep(0.1)
    if stop.is_set():
        return
    if stop.wait(0.5 * read_metrics(metrics)[0]["wall_s"]):
        return  # the run ended first: there is nothing left to disturb
    victim = cluster.worker_nodes[-1]
    landed.update(at=time.monotonic(), rounds=len(read_metrics(metrics)))
    if fault == "partition":
        cluster.set_link(victim, up=False)
        stop.wait(PARTITION_S)
        cluster.set_link(victim, up=True)
    elif fault == "flap":
        while not stop.is_set():
            cluster.set_link(victim, up=False)
            stop.wait(FLAP_DOWN_S)
            cluster.set_link(victim, up=True)
            stop.wait(FLAP_PERIOD_S - FLAP_DOWN_S)
    elif fault == "collapse":
        cluster.shape(COLLAPSE_RATE)


def _heal(cluster: NetnsCluster) -> None:
    for node in cluster.worker_nodes:
        cluster.set_link(node, up=True)
