"""`dane bench network`'s result as a Markdown table and a PNG (output.py writes them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.output import percent


def network_table(result: dict[str, Any]) -> str:
    """One row per method and bandwidth: measured and projected time, bytes, time to target."""
    target = result.get("target")
    to_target = f"s to {percent(target)}" if target else "s to target"
    lines = [
        f"| bandwidth | method | measured s | projected s | error | {to_target} | "
        "wire MB | comm MB | driver MB | wire / comm | unexplained | final acc. |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        error = (
            f"{100 * (run['projected_s'] / run['measured_s'] - 1):+.1f} %"
            if run["measured_s"]
            else ""
        )
        reached = run["time_to_target_s"]
        overhead = run["overhead_fraction"]
        lines.append(
            f"| {run['bandwidth']} | {_name(run)} | {run['measured_s']:.1f} | "
            f"{run['projected_s']:.1f} | {error} | "
            f"{'not reached' if reached is None else f'{reached:.1f}'} | "
            f"{run['wire_bytes'] / 1e6:.2f} | {run['comm_bytes'] / 1e6:.2f} | "
            f"{run['driver_bytes'] / 1e6:.2f} | {_pct(overhead)} | "
            f"{_pct(run['unexplained_fraction'])} | "
            f"{100 * (run['final_test_accuracy'] or 0):.2f} % |"
        )
    return "\n".join(lines)


def faults_table(result: dict[str, Any]) -> str:
    """One row per fault: how the run ended, what it cost, and whether the weights equal."""
    lines = [
        f"faults at {result['bandwidth']} ({result['method']}, worker TTL "
        f"{result['worker_ttl_s']:g} s):",
        "| fault | exit | resumed | rounds | attempts | shards reloaded | wall s | cost s | "
        "rounds cost s | weights equal |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in result["runs"]:
        lines.append(
            f"| {run['fault']} | {run['exit_code']} | {run['resumed']} | {run['rounds']} | "
            f"{run['attempts']} | {run['shards_reloaded']} | {run['process_wall_s']:.1f} | "
            f"{run['cost_s']:+.1f} | {_seconds(run.get('rounds_cost_s'))} | "
            f"{run['weights_equal']} |"
        )
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}"


def _name(run: dict[str, Any]) -> str:
    form = run.get("broadcast")  # older JSONs: direct or tree, the per-round form
    return f"{run['method']} ({form})" if form in ("tree", "reduce") else run["method"]


def _pct(fraction: float | None) -> str:
    return "" if fraction is None else f"{100 * fraction:+.1f} %"


def network_plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy against training wall time, one panel per bandwidth."""
    from ...pipeline.report import pyplot, save_figure

    rates = list(dict.fromkeys(run["bandwidth"] for run in result["runs"]))
    methods = list(dict.fromkeys(_name(run) for run in result["runs"]))
    fig, axes = pyplot().subplots(1, len(rates), figsize=(5 * len(rates), 4.2), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        for run in (r for r in result["runs"] if r["bandwidth"] == rate):
            curve = run["curve"]
            ax.plot(
                [p["train_wall_s"] for p in curve],
                [p["test_accuracy"] for p in curve],
                label=_name(run),
                color=f"C{methods.index(_name(run))}",
                marker=".",
            )
        if result.get("target"):
            ax.axhline(result["target"], color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{rate}, {result['workers']} workers")
        ax.set_xlabel("training wall time (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test accuracy")
    fig.tight_layout()
    save_figure(fig, path)
