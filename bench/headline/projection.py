"""The headline's projection: time to each target on m workers at k x this machine's compute,
over each link, and the speed-up each doubling of m gives.

Per seed, bench/scaling/time_methods.py's model, with what this run measured (its docstring
and bench/scaling/time_to_accuracy.py's state it whole):

    DANE's and FedAvg's recipes:  iterations to target x (C / k * W0 / m + F(m) + comm(net, m))
    DDP at m ranks:               steps to target x (S / k + ring all-reduce(net, m, G))

  iterations (steps): as measured at m shards; C: the slowest worker's compute a round,
  measured on W0 workers; F(m): the recipe's own fixed cost of a round (`dane bench scaling`'s
  tiny rounds); comm: its measured payloads on the link; S: one DDP rank's step (batch B, one
  thread); G: the gradient's bytes. The mean over the seeds is taken where every seed reached
  the target. Pure: no cluster, no clock.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from ..network.model import Network
from ..scaling.time_methods import FixedCost, dask_methods, ddp_methods


def methods_of(sweep: dict[str, Any], rank_step_s: float | None) -> dict[str, list[Any]]:
    """One seed's methods as the projection needs them: the two recipes' runs and DDP's rows."""
    methods = {name: dask_methods(sweep[name]["runs"], name) for name in ("dane", "fedavg")}
    ddp_runs = sweep["dane"].get("ddp_runs")
    if ddp_runs and rank_step_s is not None:
        methods["ddp"] = ddp_methods(ddp_runs, rank_step_s)
    return methods


def project(
    sweeps: list[dict[str, Any]],
    fixed: dict[str, FixedCost],
    rank_step_s: float | None,
    *,
    targets: tuple[float, ...],
    networks: tuple[Network, ...],
    speedups: tuple[float, ...],
) -> list[dict[str, Any]]:
    """Per target, link and compute speed-up: each method's time to the target on m workers
    (mean over the seeds, each seed's value beside it) and its speed-up per doubling of m.
    `fixed`: each recipe's FixedCost (DDP has none: its step is one all-reduce)."""
    seeds = [methods_of(sweep, rank_step_s) for sweep in sweeps]
    tables = []
    for target in targets:
        for net in networks:
            for speed in speedups:
                methods = {
                    name: _rows(
                        [s[name] for s in seeds], target, net, speed, fixed.get(name, fixed["dane"])
                    )
                    for name in seeds[0]
                }
                tables.append(
                    {
                        "target": target,
                        "network": asdict(net),
                        "label": net.label,
                        "compute_speedup": speed,
                        "methods": methods,
                        "doublings": {name: doublings(rows) for name, rows in methods.items()},
                    }
                )
    return tables


def _rows(per_seed: list[list[Any]], target, net, speed, fixed) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    rows = []
    for i, first in enumerate(per_seed[0]):
        values = [seed[i].time_s(target, net, speed, fixed) for seed in per_seed]
        whole = all(v is not None for v in values)
        rows.append(
            {
                "shards": first.shards,
                "time_s": statistics.fmean(values) if whole else None,
                "sd": statistics.stdev(values) if whole and len(values) > 1 else None,
                "values": values,
            }
        )
    return rows


def ratio(slow: float | None, fast: float | None) -> float | None:
    """slow / fast, or None where either time is missing (a target not reached)."""
    return slow / fast if slow is not None and fast else None


def doublings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The speed-up of each doubling, T(m) / T(2m), for every m whose double was run, and the
    whole range's, T(smallest m) / T(largest m) (T(1) / T(8) by default)."""
    times = {row["shards"]: row["time_s"] for row in rows}
    steps = [
        {"from": m, "to": 2 * m, "speedup": ratio(times[m], times[2 * m])}
        for m in sorted(times)
        if 2 * m in times
    ]
    low, high = min(times), max(times)
    return {
        "per_doubling": steps,
        "whole": {"from": low, "to": high, "speedup": ratio(times[low], times[high])},
    }


def table_at(tables: list[dict[str, Any]], target: float, net: Network, speed: float) -> dict:
    """The projection at one target, link and compute speed-up."""
    return next(
        t
        for t in tables
        if t["target"] == target and t["network"] == asdict(net) and t["compute_speedup"] == speed
    )
