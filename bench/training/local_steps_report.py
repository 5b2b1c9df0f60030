"""`dane bench local-steps`' table and figure: per store, candidate and K, the rounds and
examples to the target, best, final and worst fall; the accuracy by round beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..common.output import percent


def markdown_table(result: dict[str, Any]) -> str:
    """One row per run, then the verdict per store and candidate."""
    lines = [
        "| store | candidate | K | seed | rounds to target | examples to target | best | final "
        "| worst fall (points) | local steps a round (mean) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        steps = [s for s in run["local_steps"] if s is not None]
        mean_steps = f"{sum(steps) / len(steps):.0f}" if steps else "-"
        examples = run["examples_to_target"]
        lines.append(
            f"| {run['source']} | {run['candidate']} | {run['steps'] or 'one pass'} | "
            f"{run.get('seed', 0)} | "
            f"{run['rounds_to_target'] or '-'} | {examples or '-'} | {percent(run['best'])} | "
            f"{percent(run['final'])} | {run['worst_fall']:.1f} | {mean_steps} |"
        )
    lines += [
        "",
        "| store and candidate | worst fall | no fall > 2 points | final at K=300 kept "
        "| rounds to target non-increasing in K (mean over seeds, by K) |",
        "|---|---:|---|---|---|",
    ]
    for name, v in result["verdict"].items():
        rounds = ", ".join(f"{k}: {n:g}" for k, n in v["mean_rounds_to_target"].items())
        falls = f"{_yes(v['no_collapse'])} ({v['runs_with_a_fall']} of {v['runs']} runs fall)"
        lines.append(
            f"| {name} | {v['worst_fall']:.1f} | {falls} | {_yes(v['final_kept_at_300'])} | "
            f"{_yes(v['rounds_non_increasing'])} ({rounds}) |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy by round: one panel per store and candidate, one line per K (the first
    seed's run; the others are in the table)."""
    from ...pipeline.report import pyplot, save_figure

    panels = list(dict.fromkeys((r["source"], r["candidate"]) for r in result["runs"]))
    sources = list(dict.fromkeys(source for source, _ in panels))
    candidates = list(dict.fromkeys(candidate for _, candidate in panels))
    fig, axes = pyplot().subplots(
        len(sources), len(candidates), figsize=(4 * len(candidates), 3.2 * len(sources)),
        squeeze=False, sharey="row",
    )  # fmt: skip
    first_seed = [r for r in result["runs"] if r.get("seed", 0) == result["runs"][0].get("seed", 0)]
    for (source, candidate), runs in _grouped(first_seed).items():
        ax = axes[sources.index(source)][candidates.index(candidate)]
        for run in runs:
            rounds = range(1, len(run["test_accuracy"]) + 1)
            ax.plot(rounds, run["test_accuracy"], marker=".", label=f"K={run['steps'] or 'pass'}")
        ax.set_title(f"{source}: {candidate}", fontsize=9)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for row, source in enumerate(sources):
        axes[row][0].set_ylabel("test accuracy")
        axes[row][0].set_ylim(bottom=max(0.0, min(_floor(result["runs"], source), 0.9)))
    fig.tight_layout()
    save_figure(fig, path)


def _grouped(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((run["source"], run["candidate"]), []).append(run)
    return grouped


def _floor(runs: list[dict[str, Any]], source: str) -> float:
    """The y axis' bottom: the lowest accuracy after round 1 on `source`, less a margin."""
    after_first = [a for r in runs if r["source"] == source for a in r["test_accuracy"][1:]]
    return min(after_first, default=0.0) - 0.02


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "**no**")
