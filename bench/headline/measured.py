"""What `dane bench headline` measured, per method, m and seed, and over the seeds.

From each seed's `dane bench shards` results (bench/training/shards.py), at each target:
- the time to it on this machine: the rounds' training time up to the first round that reached
  it (each round's wall time less its test evaluation, as `dane bench shards` records it); a
  DDP row's process time prorated to the step that reached it (its clock leaves evaluation
  out and its steps are alike);
- the examples (images) read to get there, the iterations (DDP: steps) and the communication
  rounds (an iteration of DANE is 2, of FedAvg 1; a DDP step 1, its all-reduce);
- the final test accuracy after the budget.
The dask-dane runs ran on this machine's W0 workers (the recipe's), m / W0 shards each: the time
measured is theirs; bench/headline/projection.py projects it onto m workers.
"""

from __future__ import annotations

import statistics
from typing import Any

from ..scaling.time_methods import to_target


def stat(values: list[float | None]) -> dict[str, Any]:
    """Mean and sample standard deviation over the seeds; the mean is None unless every seed
    gave a value (a target one seed missed is not reached), the deviation None below 2."""
    reached = [v for v in values if v is not None]
    whole = len(reached) == len(values) and bool(values)
    return {
        "mean": statistics.fmean(reached) if whole else None,
        "sd": statistics.stdev(reached) if whole and len(reached) > 1 else None,
        "reached": len(reached),
        "values": values,
    }


def dask_row(run: dict[str, Any], targets: tuple[float, ...]) -> dict[str, Any]:
    """One dask-dane run (one m, one seed) at each target."""
    timing, curve = run["timing"], run["curve"]
    images = {p["round"]: p["images"] for p in curve}
    to = []
    for target in targets:
        rounds = to_target(curve, "round", target)
        to.append(
            {
                "target": target,
                "time_s": sum(timing["round_train_s"][:rounds]) if rounds else None,
                "images": images[rounds] if rounds else None,
                "iterations": rounds,
                "comm_rounds": rounds * timing["phases"] if rounds else None,
            }
        )
    return {
        "shards": run["shards"],
        "workers": timing["workers"],
        "final_test_accuracy": run["final_test_accuracy"],
        "wall_s": run["seconds"],
        "to_target": to,
    }


def ddp_row(run: dict[str, Any], targets: tuple[float, ...]) -> dict[str, Any]:
    """One DDP row of `dane bench shards` (m ranks as one process of batch m*B) at each target."""
    images = {p["step"]: p["images"] for p in run["curve"]}
    per_step = run["train_wall_s"] / run["steps"]
    to = []
    for target in targets:
        steps = to_target(run["curve"], "step", target)
        to.append(
            {
                "target": target,
                "time_s": steps * per_step if steps is not None else None,
                "images": images[steps] if steps is not None else None,
                "iterations": steps,
                "comm_rounds": steps,
            }
        )
    return {
        "shards": run["shards"],
        "workers": 1,  # one process on every core
        "final_test_accuracy": run["final_test_accuracy"],
        "wall_s": run["train_wall_s"],
        "to_target": to,
    }


def seed_rows(sweep: dict[str, Any], targets: tuple[float, ...]) -> dict[str, list[dict]]:
    """One seed's rows per method: the two recipes' own runs, and DDP's beside DANE's."""
    rows = {
        name: [dask_row(r, targets) for r in sweep[name]["runs"]] for name in ("dane", "fedavg")
    }
    if sweep["dane"].get("ddp_runs"):
        rows["ddp"] = [ddp_row(r, targets) for r in sweep["dane"]["ddp_runs"]]
    return rows


def over_seeds(sweeps: list[dict[str, Any]], targets: tuple[float, ...]) -> dict[str, list]:
    """Per method and m: each seed's row, and the mean and spread of every figure."""
    per_seed = [seed_rows(sweep, targets) for sweep in sweeps]
    methods: dict[str, list[dict[str, Any]]] = {}
    for name in per_seed[0]:
        rows = []
        for i, first in enumerate(per_seed[0][name]):
            seeds = [rows_of[name][i] for rows_of in per_seed]
            assert all(s["shards"] == first["shards"] for s in seeds)  # one order of m
            rows.append(_combined(first["shards"], seeds, [s["seed"] for s in sweeps], targets))
        methods[name] = rows
    return methods


def _combined(m: int, seeds: list[dict], names: list[int], targets: tuple) -> dict[str, Any]:
    to = []
    for j, target in enumerate(targets):
        at = [s["to_target"][j] for s in seeds]
        keys = ("time_s", "images", "iterations", "comm_rounds")
        to.append({"target": target, **{k: stat([a[k] for a in at]) for k in keys}})
    return {
        "shards": m,
        "workers": seeds[0]["workers"],
        "seeds": names,
        "final_test_accuracy": stat([s["final_test_accuracy"] for s in seeds]),
        "wall_s": stat([s["wall_s"] for s in seeds]),
        "to_target": to,
    }
