"""The skewed-shard races (issue 13) summed up: per store, each method at its best learning
rate, and the DANE family's gap to the best baseline at equal communication rounds.

    dane bench skew-summary [--target 0.88] bench-out/skew/*.json

Each JSON is a `dane bench train --store S --comm-rounds N` result
(presets/replays/skew-race-*.toml); runs
are grouped by their store, so runs added later in a JSON of their own join their store's
table. A run named `METHOD-lrX` is METHOD at local learning rate X; a method's row is its
run with the best test accuracy (the grid's pick). DANE-family methods are `dane*`,
`sdane*` and `feddyn*` (FedDyn's local problem is DANE's, its tilt kept per shard); the
others are baselines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILY = ("dane", "sdane", "feddyn")


def method_of(run_name: str) -> str:
    """`fedavg-lr0.05` -> `fedavg`; names without a rate are their own method."""
    return run_name.split("-lr")[0]


def in_family(method: str) -> bool:
    return method.startswith(FAMILY)


def accuracy_at(curve: list[dict[str, Any]], comm_rounds: int) -> float | None:
    """The last evaluated test accuracy at or before `comm_rounds` (None before the first)."""
    reached = [p["test_accuracy"] for p in curve if p["comm_rounds"] <= comm_rounds]
    return reached[-1] if reached else None


def best_per_method(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each method's run with the highest best test accuracy (a diverged run counts as 0)."""
    picked: dict[str, dict[str, Any]] = {}
    for run in result["runs"]:
        method = method_of(run["name"])
        score = run["summary"].get("best_test_accuracy") or 0.0
        if method not in picked or score > (
            picked[method]["summary"].get("best_test_accuracy") or 0
        ):
            picked[method] = run
    return picked


def _reached(run: dict[str, Any], comm_rounds: int) -> float:
    """The run's accuracy at `comm_rounds`; 0 before its first evaluation or after it stopped."""
    curve = run["curve"]
    if run.get("error") and curve and comm_rounds > curve[-1]["comm_rounds"]:
        return 0.0
    return accuracy_at(curve, comm_rounds) or 0.0


def family_gap(picked: dict[str, dict[str, Any]], marks: list[int]) -> list[dict[str, Any]]:
    """At each mark: the best DANE-family and the best baseline accuracy, and the gap."""
    rows: list[dict[str, Any]] = []
    if not any(map(in_family, picked)) or all(map(in_family, picked)):
        return rows  # nothing to compare (a result still being written, say)
    for c in marks:
        scores = {m: _reached(run, c) for m, run in picked.items()}
        family = max((m for m in scores if in_family(m)), key=scores.get)
        baseline = max((m for m in scores if not in_family(m)), key=scores.get)
        rows.append(
            {
                "comm_rounds": c,
                "family": family,
                "family_accuracy": scores[family],
                "baseline": baseline,
                "baseline_accuracy": scores[baseline],
                "gap_points": round(100 * (scores[family] - scores[baseline]), 2),
            }
        )
    return rows


def rounds_to(curve: list[dict[str, Any]], target: float) -> int | None:
    """The first communication round at which the test accuracy reached `target`."""
    return next((p["comm_rounds"] for p in curve if p["test_accuracy"] >= target), None)


def store_table(
    name: str, result: dict[str, Any], columns: int = 4, target: float | None = None
) -> str:
    """The markdown table of one store: a row per method at its picked rate."""
    picked = best_per_method(result)
    budget = max(p["comm_rounds"] for run in picked.values() for p in run["curve"])
    marks = sorted({round(budget * (k + 1) / columns) for k in range(columns)})
    lines = [
        f"**{name}** (budget {budget} communication rounds)",
        "",
        "| method | lr | "
        + " | ".join(f"@{c}" for c in marks)
        + " | best | MB sent | wall (s) |"
        + (f" to {100 * target:g} % |" if target else ""),
        "|---|---:|" + "---:|" * (len(marks) + 3 + bool(target)),
    ]
    for method, run in picked.items():
        last = run["curve"][-1] if run["curve"] else {}
        stopped = last.get("comm_rounds", 0) if run.get("error") else budget
        cells = [_pct(accuracy_at(run["curve"], c)) if c <= stopped else "stopped" for c in marks]
        note = " (diverged)" if run.get("error") else ""
        megabytes = last.get("cum_comm_bytes", 0) / 1e6
        lines.append(
            f"| {method}{note} | {run['config']['local_lr']:g} | "
            + " | ".join(cells)
            + f" | {_pct(run['summary'].get('best_test_accuracy'))} | {megabytes:.0f} | "
            f"{run['seconds']:.0f} |"
            + (f" {rounds_to(run['curve'], target) or '-'} |" if target else "")
        )
    gaps = family_gap(picked, marks)
    gap_text = ", ".join(
        f"@{g['comm_rounds']}: {g['family']} {_pct(g['family_accuracy'])} vs "
        f"{g['baseline']} {_pct(g['baseline_accuracy'])} ({g['gap_points']:+.1f})"
        for g in gaps
    )
    gap_text = gap_text or "no DANE-family run and baseline to compare"
    return "\n".join(lines) + f"\n\nDANE family against the best baseline: {gap_text}\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def by_store(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs of all results, grouped by their store's name (folder name without .zarr)."""
    grouped: dict[str, dict[str, Any]] = {}
    for result in results:
        for run in result["runs"]:
            name = Path(run["config"]["store"]).name.removesuffix(".zarr")
            grouped.setdefault(name, {"runs": []})["runs"].append(run)
    return grouped
