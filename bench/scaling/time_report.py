"""`dane bench time-to-accuracy`'s tables and figure (the numbers: time_to_accuracy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.output import percent


def _speed(k: float) -> str:
    return "this machine" if k == 1 else f"{k:g}x compute"


def _cell(row: dict[str, Any]) -> str:
    if row["time_s"] is None:
        return "not reached"
    speedup = f" ({row['speedup']:.2f}x)" if row["speedup"] else ""
    return f"{row['time_s']:.1f}{speedup}"


def markdown_table(result: dict[str, Any]) -> str:
    """Per target and network: time to target (s) and speed-up T(1) / T(m), per method and
    compute speed; then the crossover bandwidths and the check on this machine's loopback."""
    lines: list[str] = []
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for table in result["projections"]:
        groups.setdefault((table["target"], table["label"]), []).append(table)
    for (target, label), tables in groups.items():
        columns = [(t, name) for t in tables for name in t["methods"]]
        head = " | ".join(f"{name}, {_speed(t['compute_speedup'])}" for t, name in columns)
        lines += [f"Time to {percent(target)} on {label}: s (speed-up T(1) / T(m))", ""]
        lines += [f"| m | {head} |", "|---:" + "|---:" * len(columns) + "|"]
        shards = [row["shards"] for row in tables[0]["methods"][columns[0][1]]]
        for i, m in enumerate(shards):
            cells = " | ".join(_cell(t["methods"][name][i]) for t, name in columns)
            lines.append(f"| {m} | {cells} |")
        lines.append("")
    lines += _crossover_lines(result) + _check_lines(result)
    return "\n".join(lines).rstrip()


def _crossover_lines(result: dict[str, Any]) -> list[str]:
    rows = result["crossover"]
    if not rows:
        return []
    speeds = sorted({r["compute_speedup"] for r in rows})
    family = result["family"]
    lines = [f"Where {family} reaches the target before DDP (latency held at 0.05 ms):", ""]
    lines += [
        "| m | target | " + " | ".join(_speed(k) for k in speeds) + " |",
        "|---:|---:" + "|---" * len(speeds) + "|",
    ]
    keyed = {(r["shards"], r["target"], r["compute_speedup"]): r for r in rows}
    for m, target in dict.fromkeys((r["shards"], r["target"]) for r in rows):
        cells = [_crossing(keyed.get((m, target, k))) for k in speeds]
        lines.append(f"| {m} | {percent(target)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _crossing(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    first, bandwidth = row["dane_first"], row["bandwidth_gbps"]
    if bandwidth is None:
        return {"always": "at every bandwidth", "never": "at no bandwidth"}[first]
    return f"{first} {bandwidth:.3g} Gbit/s"


def _check_lines(result: dict[str, Any]) -> list[str]:
    rows = result["loopback_check"]
    if not rows:
        return []
    lines = [
        "The projection on this machine's loopback against the measured training time:",
        "",
        "| m | target | iterations | measured (s) | projected (s) | error |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shards']} | {percent(r['target'])} | {r['iterations']} | "
            f"{r['measured_s']:.1f} | {r['projected_s']:.1f} | {r['error_pct']:+.1f} % |"
        )
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    """Speed-up T(1) / T(m) against m, one panel per network, for the first target."""
    from ...pipeline.report import pyplot, save_figure

    target = result["projections"][0]["target"]
    tables = [t for t in result["projections"] if t["target"] == target]
    labels = list(dict.fromkeys(t["label"] for t in tables))
    fig, panels = pyplot().subplots(1, len(labels), figsize=(5 * len(labels), 3.8), squeeze=False)
    for panel, label in zip(panels[0], labels, strict=True):
        shards: list[int] = []
        for table in (t for t in tables if t["label"] == label):
            style = "-" if table["compute_speedup"] == 1 else ":"
            for name, rows in table["methods"].items():
                points = [(r["shards"], r["speedup"]) for r in rows if r["speedup"]]
                shards = sorted({*shards, *(r["shards"] for r in rows)})
                if points:
                    xs, ys = zip(*points, strict=True)
                    tag = f"{name}, {_speed(table['compute_speedup'])}"
                    panel.plot(xs, ys, style, marker="o", markersize=3, label=tag)
        panel.plot(shards, shards, color="grey", lw=0.8, label="ideal (m)")
        panel.plot(shards, [0.8 * m for m in shards], color="grey", ls="--", lw=0.8, label="0.8 m")
        panel.set_xscale("log", base=2)
        panel.set_yscale("log", base=2)
        panel.set_title(f"to {percent(target)}, {label}", fontsize=9)
        panel.set_xlabel("workers m (one shard each)")
        panel.set_ylabel("speed-up T(1) / T(m)")
        panel.grid(alpha=0.3)
        panel.legend(fontsize=6)
    fig.tight_layout()
    save_figure(fig, path)
