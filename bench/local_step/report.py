"""`dane bench local-step`'s table and figure, with the 2-worker race's figures beside them."""

from __future__ import annotations

from typing import Any

from .profile import TOP

# The 2-worker race on Fashion-MNIST of 2026-12-07: ms a row of each worker's or rank's steps,
# quoted beside this bench's one-process figures.
RACE = {
    "FedAvg's workers (K = 200 steps of 64 rows)": 1.27,
    "DDP's ranks (32 rows a step, all-reduce included)": 1.02,
}


def markdown_table(result: dict[str, Any]) -> str:
    """ms a row of each loop and their ratio; the weights' agreement; the top costs."""
    spec, loops = result["spec"], result["loops"]
    lines = [
        f"{spec['model']}, K = {spec['steps']} steps of {spec['batch_size']} rows, "
        f"{spec['optimizer']} lr {spec['lr']:g}, {spec['threads']} thread(s), "
        f"{spec['repeats']} repeats ({result['store_source']})",
        "",
        "| loop | ms a row (median) | fastest | each repeat |",
        "|---|---:|---:|---|",
    ]
    for name, label in (("engine", "engine: a worker's local step"), ("plain", "plain PyTorch")):
        loop = loops[name]
        runs = ", ".join(f"{v:.3f}" for v in loop["runs_ms_per_row"])
        lines.append(
            f"| {label} | {loop['ms_per_row']:.3f} | {loop['best_ms_per_row']:.3f} | {runs} |"
        )
    for label, ms in RACE.items():
        lines.append(f"| the 2-worker race, 2026-12-07: {label} | {ms:.2f} | | |")
    weights = result["weights"]
    agree = "identical" if weights["identical"] else f"max |diff| {weights['max_abs_diff']:.2e}"
    profile = result["profile"]
    lines += [
        "",
        f"engine / plain, ms a row: **{result['ratio']:.3f}** (fastest runs "
        f"{result['best_ratio']:.3f}; each repeat: "
        + ", ".join(f"{r:.3f}" for r in result["repeat_ratios"])
        + f"); final weights: {agree} ({weights['count']} values); load average "
        + " -> ".join(f"{v:.2f}" for v in result.get("load_average") or []),
        "",
        f"The engine's run under cProfile: {profile['total_s']:.3f} s, of it in dask-dane's "
        f"own functions (their Python and the tensor operators inline in them) "
        f"{profile['dask_dane_s'] * 1e3:.1f} ms ({profile['dask_dane_share']:.2%})",
        "",
        "| function | calls | own s | share |",
        "|---|---:|---:|---:|",
    ]
    for row in profile["top"]:
        lines.append(
            f"| `{row['function']}` | {row['calls']} | {row['own_s']:.4f} | {row['share']:.2%} |"
        )
    lines += [
        "",
        f"What the engine adds to the plain loop, a step (functions the two call unequally "
        f"often): {profile['added_ms_per_step']:.3f} ms in all",
        "",
        "| function | calls: engine / plain | ms a step added |",
        "|---|---:|---:|",
    ]
    for row in profile["added"][:TOP]:
        lines.append(
            f"| `{row['function']}` | {row['engine_calls']} / {row['plain_calls']} | "
            f"{row['added_ms_per_step']:+.4f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Any) -> None:
    """ms a row: each loop's median (bars) and repeats (dots), the race's figures as lines."""
    from ...pipeline.report import pyplot, save_figure

    loops = result["loops"]
    fig, axis = pyplot().subplots(figsize=(6, 3.6))
    names = ["engine", "plain"]
    axis.bar(names, [loops[n]["ms_per_row"] for n in names], color=["tab:blue", "tab:gray"])
    for position, name in enumerate(names):
        runs = loops[name]["runs_ms_per_row"]
        axis.plot([position] * len(runs), runs, "k.", markersize=6)
    for (label, ms), style in zip(RACE.items(), ("--", ":"), strict=True):
        axis.axhline(ms, color="tab:red", linestyle=style, label=f"race: {label}")
    spec = result["spec"]
    axis.set_ylabel("ms a row")
    axis.set_title(
        f"{spec['model']}, K = {spec['steps']} x {spec['batch_size']} rows, "
        f"{spec['threads']} thread(s): engine / plain {result['ratio']:.3f}",
        fontsize=9,
    )
    axis.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
