"""`dane bench time-to-accuracy`: each method's wall time to a target accuracy on m workers.

From one `dane bench shards` run (the same data in m = 1, 2, 4... shards, the same budget of
epochs for every m, DDP at m ranks beside) and one `dane bench scaling` run (its fixed-cost
rows): for every m, one shard per worker,

    time to target = iterations (or DDP steps) to the target, as the sweep measured them,
                     x the time of one on m workers,

and the time of one is bench/network/model.py's, with what the sweep measured:

    DANE family:  C / k * W0 / m  +  F(m)  +  comm(net, m, the round's measured payloads)
    DDP:          S / k  +  ring all-reduce(net, m, gradient bytes)

  C: the slowest worker's compute per iteration, measured on W0 workers holding m / W0
  shards each (their shards run one after another on one thread, so m workers each take
  1 / m of the shards' work); S: one rank's step (batch B, one thread, as a worker runs),
  from a `dane bench single --threads 1` run: the sweep's DDP rows take m*B rows a step on
  every core, so their clocks are not a rank's (and their accuracy, unlike their time, does
  not depend on the machine's load: they may run apart, in a second shards JSON);
  k: a compute speed-up (10x, 100x: GPU-class, where communication and F dominate);
  F(m): the engine's fixed cost of a round, measured by `dane bench scaling` where its
  worker count was, and beyond it one more dependent scheduling step per phase for every
  level the reduction tree gains, at the measured cost of a step between workers.

The iterations to target are taken as measured at m shards: the split itself is what the
sweep ran, so only the placement (m workers instead of W0) is projected. Test evaluation is
left out of every time, as DDP's rows leave it out.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..network.model import Network, measure_loopback
from .time_methods import (
    DaskMethod,
    FixedCost,
    dask_methods,
    ddp_methods,
    fixed_cost_from,
    rank_step_from,
    to_target,
)

COMPUTE_SPEEDUPS = (1.0, 10.0, 100.0)
TARGETS = (0.88, 0.91)
CROSSOVER_LATENCY_MS = 0.05  # the 10 Gbit/s network's; the crossover varies the bandwidth
CHECKED_SHARDS = (1, 2)  # where the sweep ran one shard per worker: projection vs measurement


def merged(sweeps: list[dict[str, Any]]) -> dict[str, Any]:
    """One sweep from several `dane bench shards` results (e.g. the DANE rows on a quiet
    machine and the DDP rows, whose accuracy does not depend on the load, run apart)."""
    merged: dict[str, Any] = {"runs": [], "ddp_runs": [], "fedavg_runs": []}
    for sweep in sweeps:
        if "spec" not in sweep or not all("shards" in row for row in sweep.get("runs") or []):
            raise ValueError("a SHARDS_JSON is not a `dane bench shards` result; pass one")
        for key, rows in merged.items():
            rows.extend(sweep.get(key) or [])
    for key, rows in merged.items():
        shards = [row["shards"] for row in rows]
        if len(set(shards)) != len(shards):
            raise ValueError(
                f"the shards JSONs hold {key} for the same m twice ({shards}); pass one each"
            )
    if not merged["runs"]:
        raise ValueError("no shards JSON holds the configuration's own rows (runs); pass one")
    return merged


def project_sweep(
    sweeps: list[dict[str, Any]],
    scaling: dict[str, Any],
    *,
    ddp_step: dict[str, Any] | None = None,
    targets: tuple[float, ...] = TARGETS,
    networks: tuple[Network, ...],
    speedups: tuple[float, ...] = COMPUTE_SPEEDUPS,
) -> dict[str, Any]:
    """Every method's projected time to each target on m workers, its speed-up T(1) / T(m),
    the bandwidth where the DANE family and DDP trade places, and the check at m = 1, 2.
    `ddp_step`: a `dane bench single --threads 1` result at the rank's batch (DDP's rows)."""
    fixed = fixed_cost_from(scaling)
    sweep = merged(sweeps)
    config = sweep["runs"][0]["config"]
    family = config["algorithm"]
    methods: dict[str, list[Any]] = {family: dask_methods(sweep["runs"], family)}
    if sweep["fedavg_runs"]:
        methods["fedavg"] = dask_methods(sweep["fedavg_runs"], "fedavg")
    if sweep["ddp_runs"]:
        if ddp_step is None:
            raise ValueError("the shards JSONs hold DDP rows: pass --ddp-step (one rank's step)")
        rank_step = rank_step_from(ddp_step, config["batch_size"], config["model"])
        methods["ddp"] = ddp_methods(sweep["ddp_runs"], rank_step)
    tables = [
        {
            "target": target,
            "network": asdict(net),
            "label": net.label,
            "compute_speedup": speed,
            "methods": {
                name: _times(rows, target, net, speed, fixed) for name, rows in methods.items()
            },
        }
        for target in targets
        for net in networks
        for speed in speedups
    ]
    crossovers = []
    if "ddp" in methods:
        crossovers = _crossovers(methods[family], methods["ddp"], targets, speedups, fixed)
    return {
        "fixed_cost": asdict(fixed),
        "family": family,
        "projections": tables,
        "crossover": crossovers,
        "loopback_check": loopback_check(sweep["runs"], methods[family], targets, fixed),
    }


def _times(methods: list[Any], target: float, net: Network, speed: float, fixed: FixedCost) -> list:
    times = {m.shards: m.time_s(target, net, speed, fixed) for m in methods}
    one = times.get(1)
    return [
        {"shards": m, "time_s": t, "speedup": one / t if one and t else None}
        for m, t in times.items()
    ]


def _crossovers(family, ddp, targets, speedups, fixed) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Per m, target and compute speed: where the DANE family and DDP reach the target at the
    same time. Both times are a + k / B in the bandwidth B (latency held at
    CROSSOVER_LATENCY_MS), so two bandwidths give a and k, and the crossing is exact."""
    ranks = {m.shards: m for m in ddp}
    rows = []
    for method in family:
        rival = ranks.get(method.shards)
        for target in targets:
            for speed in speedups:
                if rival is None:
                    continue
                rows.append(
                    {
                        "shards": method.shards,
                        "target": target,
                        "compute_speedup": speed,
                        **crossing(method, rival, target, speed, fixed),
                    }
                )
    return rows


def crossing(family: Any, ddp: Any, target: float, speed: float, fixed: FixedCost) -> dict:
    """{"dane_first": "always" | "never" | "below" | "above" | None, "bandwidth_gbps": B}:
    the family reaches `target` before DDP at every bandwidth, at none, or below / above B."""
    lines = []
    for method in (family, ddp):
        slow, fast = (
            method.time_s(
                target, Network(bandwidth_gbps=b, latency_ms=CROSSOVER_LATENCY_MS), speed, fixed
            )
            for b in (1.0, 10.0)
        )
        if slow is None or fast is None:
            return {"dane_first": "never" if method is family else "always", "bandwidth_gbps": None}
        k = (slow - fast) / (1.0 - 0.1)  # seconds per (1 / Gbit/s)
        lines.append((fast - 0.1 * k, k))
    (a_family, k_family), (a_ddp, k_ddp) = lines
    if k_family == k_ddp:
        return {"dane_first": "always" if a_family < a_ddp else "never", "bandwidth_gbps": None}
    x = (a_ddp - a_family) / (k_family - k_ddp)  # 1 / B where the two times are equal
    if x <= 0:  # no crossing at a positive bandwidth: one side wins everywhere
        first = "always" if a_family + k_family < a_ddp + k_ddp else "never"
        return {"dane_first": first, "bandwidth_gbps": None}
    return {"dane_first": "below" if k_family < k_ddp else "above", "bandwidth_gbps": 1.0 / x}


def loopback_check(
    runs: list[dict[str, Any]],
    family: list[DaskMethod],
    targets: tuple[float, ...],
    fixed: FixedCost,
) -> list[dict[str, Any]]:
    """Where the sweep ran one shard per worker (m = 1, 2): the projected time to each target on
    this machine's loopback against the measured training time to it."""
    loopback = measure_loopback()
    rows = []
    for run, method in zip(runs, family, strict=True):
        if method.shards not in CHECKED_SHARDS or method.workers != method.shards:
            continue
        for target in targets:
            iterations = to_target(method.curve, "round", target)
            if iterations is None:
                continue
            measured = sum(run["timing"]["round_train_s"][:iterations])
            projected = method.time_s(target, loopback, 1.0, fixed)
            rows.append(
                {
                    "shards": method.shards,
                    "target": target,
                    "iterations": iterations,
                    "measured_s": measured,
                    "projected_s": projected,
                    "error_pct": 100 * (projected / measured - 1),
                }
            )
    return rows
