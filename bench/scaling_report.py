"""The scaling and DDP benchmarks' results as Markdown tables and PNGs (output.py writes)."""

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
    from ..pipeline.report import pyplot, save_figure

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


def compare_table(result: dict[str, Any]) -> str:
    """`dane bench ddp`: one row per method, then the projected times to target."""
    target = result["target"]
    lines = [
        f"| method | comm rounds to {target:.0%} | time to {target:.0%} (s) | "
        "MB to target | final acc. | best acc. | compute per round (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method in result["methods"].values():
        rounds = method["comm_rounds_to_target"]
        seconds = method["time_to_target_s"]
        moved = method["bytes_to_target"]
        lines.append(
            f"| {method['label']} | {rounds if rounds is not None else 'not reached'} | "
            f"{f'{seconds:.1f}' if seconds is not None else '-'} | "
            f"{f'{moved / 1e6:.1f}' if moved is not None else '-'} | "
            f"{method['final_test_accuracy']:.4f} | {method['best_test_accuracy']:.4f} | "
            f"{method['round_compute_s']:.4f} |"
        )
    projection = result["projection"]
    for name, check in projection["loopback_check"].items():
        lines.append(
            f"\nloopback projection, {name}: {check['projected_s']:.1f} s vs measured "
            f"{check['measured_s']:.1f} s ({check['error_pct']:+.1f} %)"
        )
    for net in projection["networks"]:
        names = [k for k in net["time_to_target_s"][0] if k != "workers"]
        lines.append(f"\nprojected time to {target:.0%} (s) at {net['label']}:")
        lines.append("| workers | " + " | ".join(names) + " |")
        lines.append("|---:|" + "---:|" * len(names))
        for row in net["time_to_target_s"]:
            lines.append(
                f"| {row['workers']} | " + " | ".join(f"{row[n]:.1f}" for n in names) + " |"
            )
    return "\n".join(lines)


def compare_plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy against communication rounds and against training wall time."""
    from ..pipeline.report import pyplot, save_figure

    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for method in result["methods"].values():
        curve = method["curve"]
        accuracy = [p["test_accuracy"] for p in curve]
        axes[0].plot([max(p["comm_rounds"], 1) for p in curve], accuracy, label=method["label"])
        axes[1].plot([p["train_wall_s"] for p in curve], accuracy, label=method["label"])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("communication rounds (log)")
    axes[1].set_xlabel("training wall time (s)")
    for ax in axes:
        ax.axhline(result["target"], color="grey", linestyle=":")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(max(0.0, result["target"] - 0.3), 1.0)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def _fixed_cost_explained(fixed: dict[str, Any]) -> str:
    """The fixed cost against what limits it: dependent steps x one step's cost, busy time."""
    hop = fixed["hop"]
    steps = fixed["dependent_steps"]
    alternating = ""
    if "alternating_ms" in hop:
        alternating = f", {hop['alternating_ms']:.1f} ms alternating between two"
    timeline = fixed.get("timeline") or {}
    return (
        f"{steps} dependent steps; one step of a chain of trivial tasks costs "
        f"{hop['same_worker_ms']:.1f} ms on one worker{alternating}: {steps} x "
        f"{hop['same_worker_ms']:.1f} = {steps * hop['same_worker_ms']:.0f} ms; round "
        f"{timeline.get('round', '-')}: some worker computing {timeline.get('busy_ms', 0):.0f} of "
        f"the {timeline.get('span_ms', 0):.0f} ms from its first task to its last"
    )
