"""`dane bench ddp`'s result as a Markdown table and a PNG (output.py writes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.output import percent


def compare_table(result: dict[str, Any]) -> str:
    """One row per method: to each target its rounds, seconds, MB and images; then the
    projected times to the first target."""
    targets = result.get("targets") or [result["target"]]
    head = " | ".join(f"to {percent(t)}: comm rounds / s / MB / images" for t in targets)
    lines = [
        f"| method | {head} | final acc. | best acc. |",
        "|---|" + "---:|" * len(targets) + "---:|---:|",
    ]
    for method in result["methods"].values():
        reached = method.get("to_target", {}).values() or [None]
        cells = " | ".join(_reached(point) for point in reached)
        note = " (diverged)" if method.get("diverged") else ""
        lines.append(
            f"| {method['label']}{note} | {cells} | {_accuracy(method['final_test_accuracy'])} | "
            f"{_accuracy(method['best_test_accuracy'])} |"
        )
    projection = result["projection"]
    for name, check in projection["loopback_check"].items():
        lines.append(
            f"\nloopback projection, {name}: {check['projected_s']:.1f} s vs measured "
            f"{check['measured_s']:.1f} s ({check['error_pct']:+.1f} %)"
        )
    for net in projection["networks"]:
        names = [k for k in net["time_to_target_s"][0] if k != "workers"]
        lines.append(f"\nprojected time to {percent(targets[0])} (s) at {net['label']}:")
        lines.append("| workers | " + " | ".join(names) + " |")
        lines.append("|---:|" + "---:|" * len(names))
        for row in net["time_to_target_s"]:
            lines.append(
                f"| {row['workers']} | " + " | ".join(f"{row[n]:.1f}" for n in names) + " |"
            )
    return "\n".join(lines)


def _accuracy(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _reached(point: dict[str, Any] | None) -> str:
    if point is None:
        return "not reached"
    return (
        f"{point['comm_rounds']} / {point['train_wall_s']:.1f} / "
        f"{point['cum_bytes'] / 1e6:.0f} / {point['images']}"
    )


def compare_plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy against communication rounds, training wall time and images."""
    from ...pipeline.report import pyplot, save_figure

    fig, axes = pyplot().subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for i, method in enumerate(result["methods"].values()):
        curve, style = method["curve"], {"label": method["label"], "color": f"C{i}"}
        accuracy = [p["test_accuracy"] for p in curve]
        if method["phases"]:  # the single process never communicates
            axes[0].plot([max(p["comm_rounds"], 1) for p in curve], accuracy, **style)
        axes[1].plot([p["train_wall_s"] for p in curve], accuracy, **style)
        axes[2].plot([p["images"] for p in curve], accuracy, **style)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("communication rounds (log)")
    axes[1].set_xlabel("training wall time (s)")
    axes[2].set_xlabel("images processed")
    axes[0].set_ylabel("test accuracy")
    for ax, target in [(ax, t) for ax in axes for t in result.get("targets") or [result["target"]]]:
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
