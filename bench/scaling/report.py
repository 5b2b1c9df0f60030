"""The scaling benchmark's result as a Markdown table and a PNG (output.py writes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def markdown_table(result: dict[str, Any]) -> str:
    lines = [
        "| workers | round (s) | speedup | efficiency | compute (s) | transfer (s) | "
        "scheduler/graph (s) | driver (s) | comm_bytes | Dask bytes | Dask/pipeline |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        m = run["median"]
        note = " (more workers than cores)" if run["oversubscribed"] else ""
        lines.append(
            f"| {run['workers']}{note} | {m['wall_s']:.3f} | {run['speedup']:.2f} | "
            f"{run['efficiency']:.2f} | {m['compute_s']:.3f} | {m['transfer_s']:.4f} | "
            f"{m['overhead_s']:.4f} | {m['driver_s']:.4f} | {m['comm_bytes']:.0f} | "
            f"{m['dask_bytes']:.0f} | {m['dask_bytes'] / max(m['comm_bytes'], 1):.4f} |"
        )
    if "reference" in result:
        lines.append(
            f"\nreference.py (one process, one thread): {result['reference']['median_s']:.3f} s "
            f"a round; 1-worker cluster / reference = {result.get('overhead_ratio', 0):.4f}"
        )
    for fixed in result.get("fixed_cost", []):
        lines.append(
            f"fixed cost, {fixed['workers']} worker(s), {fixed['shards']} shards: "
            f"{fixed['ms_per_round']:.1f} ms a round, {fixed['ms_per_task']:.2f} ms a task "
            f"({fixed['tasks_per_round']} tasks)"
        )
        if "hop" in fixed:
            lines.append("  " + _fixed_cost_explained(fixed))
    for check in result.get("projection", {}).get("loopback_check", []):
        lines.append(
            f"loopback projection, {check['workers']} worker(s): {check['projected_s']:.3f} s "
            f"vs measured {check['measured_s']:.3f} s ({check['error_pct']:+.1f} %)"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Speedup against workers with the ideal line, and the round's breakdown."""
    from ...pipeline.report import pyplot, save_figure

    plt = pyplot()

    runs = result["runs"]
    workers = [r["workers"] for r in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(workers, [w / workers[0] for w in workers], "k--", label="ideal")
    left.plot(workers, [r["speedup"] for r in runs], "o-", label="measured")
    for r in runs:
        if r["oversubscribed"]:
            left.annotate(
                "> cores",
                (r["workers"], r["speedup"]),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
            )
    left.set_xlabel("workers")
    left.set_ylabel("speedup of a round")
    left.set_xticks(workers)
    left.legend()
    left.set_title(f"{result['spec']['model']}, {result['num_shards']} shards")
    parts = [
        ("compute_s", "compute"),
        ("transfer_s", "transfer"),
        ("overhead_s", "scheduler/graph"),
        ("driver_s", "driver"),
    ]
    bottom = [0.0] * len(runs)
    for key, label in parts:
        values = [r["median"][key] for r in runs]
        right.bar([str(w) for w in workers], values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    right.set_xlabel("workers")
    right.set_ylabel("seconds per round (median)")
    right.legend()
    fig.tight_layout()
    save_figure(fig, path)


def _fixed_cost_explained(fixed: dict[str, Any]) -> str:
    """The fixed cost against what limits it: dependent steps x one step's cost, busy time."""
    hop = fixed["hop"]
    steps = fixed["dependent_steps"]
    alternating = ""
    if "alternating_ms" in hop:
        alternating = f", {hop['alternating_ms']:.1f} ms alternating between two"
    if "alternating_payload_ms" in hop:
        alternating += (
            f", {hop['alternating_payload_ms']:.1f} ms passing the model's "
            f"{hop['payload_bytes']} bytes"
        )
    timeline = fixed.get("timeline") or {}
    in_hops = ""
    if "fixed_cost_hops" in fixed:
        in_hops = (
            f"; the round costs {fixed['fixed_cost_hops']:.1f} hops of {fixed['hop_ms']:.1f} ms"
        )
    return (
        f"{steps} dependent steps{in_hops}; one step of a chain of trivial tasks costs "
        f"{hop['same_worker_ms']:.1f} ms on one worker{alternating}: {steps} x "
        f"{hop['same_worker_ms']:.1f} = {steps * hop['same_worker_ms']:.0f} ms; round "
        f"{timeline.get('round', '-')}: some worker computing {timeline.get('busy_ms', 0):.0f} of "
        f"the {timeline.get('span_ms', 0):.0f} ms from its first task to its last"
    )
