"""`dane bench defaults`' table and plot: per candidate, the runs that survived and the worst
spike; per network, each candidate's worst loss ratio."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def markdown_table(result: dict[str, Any]) -> str:
    """The verdict per candidate, then the worst ratio per (store, network) and candidate."""
    lines = [
        "| candidate | survived | spiked | stuck | worst loss / initial | mean final acc. |"
        " min final acc. | wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in result["verdict"].items():
        lines.append(
            f"| {name} | {v['survived']} / {v['runs']} | {v['spiked']} | {v['stuck']} | "
            f"{v['worst_ratio']:.3g} | "
            f"{v['mean_final_accuracy']:.4f} | {v['min_final_accuracy']:.4f} | {v['wall_s']:.0f} |"
        )
    candidates = list(result["verdict"])
    lines += ["", "| store | network | " + " | ".join(candidates) + " |"]
    lines.append("|---|---|" + "---:|" * len(candidates))
    for source, model in _nets(result["runs"]):
        cells = []
        for candidate in candidates:
            own = _runs(result["runs"], source, model, candidate)
            worst = max(r["worst_ratio"] for r in own)
            cells.append(f"{worst:.2f}" + ("" if all(r["survived"] for r in own) else " ✗"))
        lines.append(f"| {source} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Worst loss ratio (log scale) and final accuracy per network, one bar per candidate."""
    from ...pipeline.report import pyplot, save_figure

    nets = _nets(result["runs"])
    candidates = list(result["verdict"])
    fig, (ratio, accuracy) = pyplot().subplots(2, 1, figsize=(12, 7), sharex=True)
    width = 0.8 / len(candidates)
    for k, candidate in enumerate(candidates):
        own = [_runs(result["runs"], source, model, candidate) for source, model in nets]
        xs = [i + k * width for i in range(len(nets))]
        ratio.bar(xs, [max(r["worst_ratio"] for r in runs) for runs in own], width, label=candidate)
        finals = [min(r["test_accuracy"][-1] for r in runs) for runs in own]
        accuracy.bar(xs, finals, width, label=candidate)
    ratio.axhline(1.0, color="black", linewidth=0.8)
    ratio.set_yscale("log")
    ratio.set_ylabel("worst round's train loss / initial")
    accuracy.set_ylabel("final test accuracy (worst seed)")
    accuracy.set_xticks([i + 0.4 - width / 2 for i in range(len(nets))])
    accuracy.set_xticklabels([f"{s}\n{m}" for s, m in nets], fontsize=7)
    ratio.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    save_figure(fig, path)


def _nets(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r["source"], r["model"]) for r in runs))


def _runs(runs: list[dict[str, Any]], source: str, model: str, candidate: str) -> list[dict]:
    return [
        r for r in runs if (r["source"], r["model"], r["candidate"]) == (source, model, candidate)
    ]
