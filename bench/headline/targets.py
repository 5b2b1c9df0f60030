"""The headline's targets, each set against what was measured or projected: met or not met,
with the numbers. All at the first target accuracy (88 % by default), for DANE's recipe:

- time: T(1) / T(8) at least 5.8 at 1x and 100x compute on the fastest link (10 Gbit/s);
  on other shard counts, 5.8 / 8 of the range's ratio (0.725 m against m = 1);
- examples: the images read to the target at m = 8 at most 1.3x those at m = 1;
- accuracy: the final accuracy at every m > 1 within 0.5 points of m = 1's;
- against FedAvg: DANE's projected time no longer than FedAvg's at any m, speed and link.
"""

from __future__ import annotations

from typing import Any

from ..common.output import percent
from ..network.model import Network
from .projection import ratio, table_at

SPEEDUP_PER_M = 5.8 / 8  # DANE at m = 8 at least 5.8x m = 1
EXAMPLES_RATIO = 1.3
ACCURACY_POINTS = 0.5
TIME_SPEEDS = (1.0, 100.0)


def _fmt(value: float | None, form: str = ".2f", unit: str = "x") -> str:
    return "not reached" if value is None else f"{value:{form}}{unit}"


def time_check(tables: list, target: float, fast: Network, speeds: tuple, shards: tuple) -> dict:
    """DANE's T(smallest m) / T(largest m) on the fastest link, at each of `speeds`."""
    low, high = min(shards), max(shards)
    wanted = SPEEDUP_PER_M * high / low
    got = {
        k: table_at(tables, target, fast, k)["doublings"]["dane"]["whole"]["speedup"]
        for k in speeds
    }
    cells = ", ".join(f"{k:g}x compute: {_fmt(v)}" for k, v in got.items())
    return {
        "name": "time",
        "target": f"DANE m = {high} at least {wanted:.2f}x m = {low} in time to {percent(target)} "
        f"({', '.join(f'{k:g}x' for k in speeds)} compute, {fast.label})",
        "measured": f"T({low}) / T({high}) projected: {cells}",
        "values": {f"{k:g}": v for k, v in got.items()},
        "met": all(v is not None and v >= wanted for v in got.values()),
    }


def examples_check(measured: dict, target: float, shards: tuple) -> dict:
    """The images DANE read to the target at the largest m against the smallest m's."""
    low, high = min(shards), max(shards)
    means = {row["shards"]: _at(row, target)["images"]["mean"] for row in measured["dane"]}
    got = ratio(means.get(high), means.get(low))
    most, least = (_fmt(means.get(m), ",.0f", "") for m in (high, low))
    return {
        "name": "examples",
        "target": f"examples to {percent(target)} at m = {high} at most "
        f"{EXAMPLES_RATIO}x m = {low}",
        "measured": f"{most} against {least} images: {_fmt(got)}",
        "values": {"ratio": got},
        "met": got is not None and got <= EXAMPLES_RATIO,
    }


def accuracy_check(measured: dict, shards: tuple) -> dict:
    """DANE's final accuracy at every m > the smallest against the smallest m's, in points."""
    low = min(shards)
    final = {row["shards"]: row["final_test_accuracy"]["mean"] for row in measured["dane"]}
    gaps = {m: 100 * (final[m] - final[low]) for m in sorted(final) if m != low}
    cells = ", ".join(f"m = {m}: {gap:+.2f}" for m, gap in gaps.items())
    return {
        "name": "accuracy",
        "target": f"final accuracy within {ACCURACY_POINTS} points of m = {low} at every m",
        "measured": f"{cells} points (m = {low}: {100 * final[low]:.2f} %)",
        "values": {str(m): gap for m, gap in gaps.items()},
        "met": all(gap >= -ACCURACY_POINTS for gap in gaps.values()),
    }


def fedavg_check(tables: list, target: float) -> dict:
    """DANE's projected time against FedAvg's at every m, speed and link: the worst ratio."""
    worst: tuple[float, str] | None = None
    met = True
    for table in (t for t in tables if t["target"] == target):
        fedavg = {r["shards"]: r["time_s"] for r in table["methods"]["fedavg"]}
        for row in table["methods"]["dane"]:
            where = f"m = {row['shards']}, {table['compute_speedup']:g}x, {table['label']}"
            rival = fedavg[row["shards"]]
            if row["time_s"] is None:  # DANE did not get there: no claim to be faster
                met, worst = False, (float("inf"), where)
                continue
            share = row["time_s"] / rival if rival else 0.0  # FedAvg never got there: DANE won
            met = met and share <= 1.0
            if worst is None or share > worst[0]:
                worst = (share, where)
    share, where = worst or (0.0, "")
    text = "DANE not reached" if share == float("inf") else f"{share:.2f}x FedAvg's time"
    return {
        "name": "against FedAvg",
        "target": f"DANE no slower than FedAvg to {percent(target)} at any m, speed and link",
        "measured": f"the worst case: {text} ({where})",
        "values": {"worst_ratio": None if share == float("inf") else share, "where": where},
        "met": met,
    }


def check_targets(
    measured: dict[str, list], tables: list[dict[str, Any]], spec: Any
) -> list[dict[str, Any]]:
    """Every target, at the first target accuracy, in the order the issue lists them."""
    target = spec.targets[0]
    fast = max(spec.networks, key=lambda n: n.bandwidth_gbps)
    speeds = tuple(k for k in TIME_SPEEDS if k in spec.speedups) or (min(spec.speedups),)
    return [
        time_check(tables, target, fast, speeds, spec.shards),
        examples_check(measured, target, spec.shards),
        accuracy_check(measured, spec.shards),
        fedavg_check(tables, target),
    ]


def _at(row: dict[str, Any], target: float) -> dict[str, Any]:
    return next(t for t in row["to_target"] if t["target"] == target)
