"""`dane bench collective`'s table and figure."""

from __future__ import annotations

from typing import Any


def markdown_table(result: dict[str, Any]) -> str:
    """One row per configuration and collective (2 workers), then the projection."""
    lines = [
        "| round | collective | fixed cost | in Dask hops | in gloo all-gathers | less compute "
        "| in Dask hops | model's round |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["summary"]:
        lines.append(
            f"| {row['config']} | {row['collective']} | {row['fixed_ms']:.1f} ms | "
            f"{row['fixed_hops']:.2f} (hop {row['hop_ms']:.1f} ms) | "
            f"{row['fixed_allgathers']:.1f} (all-gather {row['allgather_ms']:.2f} ms) | "
            f"{row['engine_ms']:.1f} ms | {row['engine_hops']:.2f} | "
            f"{row['round_s']:.3f} s ({row['model']}) |"
        )
    for wide in result.get("wide", []):
        lines.append(
            f"\nFedAvg round at {wide['model_bytes'] / 1e6:.1f} MB ({wide['model']}), "
            f"--collective {wide['collective']}: {wide['round_s']:.3f} s (median)"
        )
    for collective, projections in result.get("projection", {}).items():
        for basis, projected in projections.items():
            for speed, by_m in projected["speedups"].items():
                figures = ", ".join(f"m = {m}: {s:.2f}" for m, s in sorted(by_m.items()))
                lines.append(
                    f"\n{collective} ({basis}), {speed} compute, speed-up to 88 %: {figures}"
                )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Any) -> None:
    """Fixed cost a round (ms, log scale) per configuration and collective, with one Dask
    hop and one gloo all-gather of the same bytes as marks."""
    from ...pipeline.report import pyplot, save_figure

    rows = result["summary"]
    fig, axis = pyplot().subplots(figsize=(7, 0.55 * len(rows) + 1.4))
    positions = range(len(rows))
    colours = ["tab:blue" if r["collective"] == "dask" else "tab:orange" for r in rows]
    axis.barh(positions, [r["fixed_ms"] for r in rows], color=colours)
    axis.plot([r["hop_ms"] for r in rows], positions, "k|", markersize=16, label="one Dask hop")
    axis.plot([r["allgather_ms"] for r in rows], positions, "r|", markersize=16,
              label="one gloo all-gather")  # fmt: skip
    axis.set_yticks(list(positions), [f"{r['config']}, {r['collective']}" for r in rows])
    axis.invert_yaxis()
    axis.set_xscale("log")
    axis.set_xlabel("fixed cost of a round, ms (2 workers, 8 shards, tiny model; median)")
    axis.legend(loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)
