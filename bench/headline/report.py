"""`dane bench headline`'s tables and figure (the numbers: measured.py, projection.py and
targets.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.output import percent

NAMES = {"dane": "DANE", "fedavg": "FedAvg", "ddp": "DDP"}
COLOURS = {"dane": "C0", "fedavg": "C1", "ddp": "C2"}  # a method's colour; a link's line style


def _stat(s: dict[str, Any], form: str = ".1f", scale: float = 1.0) -> str:
    if s["mean"] is None:
        return f"not reached ({s['reached']}/{len(s['values'])})"
    sd = f" ± {scale * s['sd']:{form}}" if s["sd"] is not None else ""
    return f"{scale * s['mean']:{form}}{sd}"


def measured_lines(result: dict[str, Any]) -> list[str]:
    """Per method and m: final accuracy and, per target, time, images and iterations."""
    spec = result["spec"]
    head, rule = "| method | m | final acc. (%) |", "|---|---:|---:|"
    for target in spec["targets"]:
        head += f" to {percent(target)}: s | images | iterations |"
        rule += "---:|---:|---:|"
    seeds = ", ".join(map(str, spec["seeds"]))
    lines = [f"Measured on this machine (mean ± sd over seeds {seeds}):", "", head, rule]
    for name, rows in result["measured"]["methods"].items():
        for row in rows:
            cells = [NAMES[name], str(row["shards"]), _stat(row["final_test_accuracy"], ".2f", 100)]
            for at in row["to_target"]:
                cells += [
                    _stat(at["time_s"]),
                    _stat(at["images"], ",.0f"),
                    _stat(at["iterations"], ".4g"),
                ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _time(row: dict[str, Any]) -> str:
    return "not reached" if row["time_s"] is None else f"{row['time_s']:.2f}"


def projected_lines(result: dict[str, Any]) -> list[str]:
    """Per target and link: each method's projected time to it on m workers, per compute speed."""
    lines: list[str] = []
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for table in result["projected"]["tables"]:
        groups.setdefault((table["target"], table["label"]), []).append(table)
    for (target, label), tables in groups.items():
        columns = [(t, name) for t in tables for name in t["methods"]]
        head = " | ".join(f"{NAMES[n]} {t['compute_speedup']:g}x" for t, n in columns)
        lines += ["", f"Projected time to {percent(target)} on m workers, {label} (s):", ""]
        lines += [f"| m | {head} |", "|---:" + "|---:" * len(columns) + "|"]
        for i, row in enumerate(tables[0]["methods"]["dane"]):
            cells = " | ".join(_time(t["methods"][n][i]) for t, n in columns)
            lines.append(f"| {row['shards']} | {cells} |")
    return lines


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def doubling_lines(result: dict[str, Any]) -> list[str]:
    """The speed-up per doubling, T(m) / T(2m), and the whole range's, per method, speed, link."""
    tables = result["projected"]["tables"]
    first = tables[0]["doublings"]["dane"]
    steps = [f"T({d['from']})/T({d['to']})" for d in first["per_doubling"]]
    whole = f"T({first['whole']['from']})/T({first['whole']['to']})"
    lines = ["", "Speed-up per doubling of m, projected (T(m) / T(2m); 2.00 halves the time):", ""]
    lines += [f"| target | link | compute | method | {' | '.join(steps)} | {whole} |"]
    lines += ["|---:|---|---:|---|" + "---:|" * (len(steps) + 1)]
    for t in tables:
        for name, d in t["doublings"].items():
            cells = [_speedup(s["speedup"]) for s in d["per_doubling"]]
            lines.append(
                f"| {percent(t['target'])} | {t['label']} | {t['compute_speedup']:g}x | "
                f"{NAMES[name]} | {' | '.join(cells)} | {_speedup(d['whole']['speedup'])} |"
            )
    return lines


def target_lines(result: dict[str, Any]) -> list[str]:
    lines = ["", "The targets:", "", "| target | measured | met? |", "|---|---|---|"]
    for check in result["targets"]:
        verdict = "**met**" if check["met"] else "**not met**"
        lines.append(f"| {check['target']} | {check['measured']} | {verdict} |")
    return lines


def markdown_table(result: dict[str, Any]) -> str:
    """Measured, projected, the speed-ups per doubling and the targets, in that order."""
    pilot = ["Pilot: a subset of the rows, a smaller budget, one seed.", ""]
    head = pilot if result["spec"]["pilot"] else []
    lines = head + measured_lines(result) + projected_lines(result)
    return "\n".join(lines + doubling_lines(result) + target_lines(result))


def plot(result: dict[str, Any], path: Path) -> None:
    """Projected time to the first target against m, log-log, per method, with the ideal
    halving line from DANE's time at the smallest m; a panel per compute speed (1x, 100x)."""
    from ...pipeline.report import pyplot, save_figure

    tables = result["projected"]["tables"]
    target = result["spec"]["targets"][0]
    speeds = [k for k in (1.0, 100.0) if k in result["spec"]["speedups"]] or [1.0]
    fast = max(result["spec"]["networks"], key=lambda n: n["bandwidth_gbps"])
    fig, panels = pyplot().subplots(1, len(speeds), figsize=(5 * len(speeds), 3.8), squeeze=False)
    for panel, speed in zip(panels[0], speeds, strict=True):
        chosen = [t for t in tables if t["target"] == target and t["compute_speedup"] == speed]
        for table in chosen:
            style = "-" if table["network"] == fast else ":"
            for name, rows in table["methods"].items():
                points = [(r["shards"], r["time_s"]) for r in rows if r["time_s"]]
                if points:
                    xs, ys = zip(*points, strict=True)
                    label = f"{NAMES[name]}, {table['label']}"
                    colour = COLOURS[name]
                    panel.plot(xs, ys, style, color=colour, marker="o", markersize=3, label=label)
            if table["network"] == fast:
                _ideal(panel, table["methods"]["dane"])
        panel.set_xscale("log", base=2)
        panel.set_yscale("log")
        shards = result["spec"]["shards"]
        panel.set_xticks(shards, [str(m) for m in shards])
        panel.set_title(f"to {percent(target)}, {speed:g}x compute (projected)", fontsize=9)
        panel.set_xlabel("workers m (one shard each)")
        panel.set_ylabel("time to target (s)")
        panel.grid(alpha=0.3)
        panel.legend(fontsize=6)
    fig.tight_layout()
    save_figure(fig, path)


def _ideal(panel: Any, rows: list[dict[str, Any]]) -> None:
    """T(m0) * m0 / m: each doubling halves the time, from DANE's smallest m."""
    start = rows[0]
    if start["time_s"]:
        shards = [r["shards"] for r in rows]
        ideal = [start["time_s"] * start["shards"] / m for m in shards]
        panel.plot(shards, ideal, color="grey", ls="--", lw=0.8, label="ideal: halves per doubling")
