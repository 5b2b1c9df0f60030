"""The convergence benchmark's summary: medians over seeds, the Markdown table, the figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...pipeline.report import pyplot, save_figure

THRESHOLD = 1e-6  # the suboptimality a run must reach (the paper's figures stop there)


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (algorithm, m, N, mu): medians over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for cell in cells:
        key = (cell["algorithm"], cell["machines"], cell["samples"], cell["mu"])
        groups.setdefault(key, []).append(cell)
    rows = []
    for (algorithm, machines, samples, mu), group in groups.items():
        reached = [c["iterations_to_threshold"] for c in group]
        comm = [c["comm_rounds_to_threshold"] for c in group]
        radii = [c["spectral_radius"] for c in group if c["spectral_radius"] is not None]
        finals = [c["log10_suboptimality"][-1] for c in group]
        rows.append(
            {
                "algorithm": algorithm,
                "machines": machines,
                "samples": samples,
                "mu": mu,
                "seeds": len(group),
                "measured_rate": _median([c["measured_rate"] for c in group]),
                "spectral_radius": _median(radii) if radii else None,
                "iterations_to_threshold": _median_or_none(reached),
                "comm_rounds_to_threshold": _median_or_none(comm),
                "final_log10_suboptimality": _median(
                    [f if f is not None else math.inf for f in finals]
                ),
                "diverged": sum(c["diverged"] for c in group),
            }
        )
    return rows


def _median(values: list[float]) -> float:
    finite = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.median(finite)) if finite else math.nan


def _median_or_none(values: list[int | None]) -> float | None:
    """Median over seeds, with 'not reached' counted as infinitely many; None if that wins."""
    ranked = sorted(math.inf if v is None else v for v in values)
    middle = float(np.median(ranked))
    return None if math.isinf(middle) else middle


def markdown_table(result: dict[str, Any]) -> str:
    """The summary rows as a Markdown table; '> R (~T)' extrapolates T at the measured rate."""
    rounds = result["spec"]["rounds"]
    lines = [
        "| algorithm | m | N | mu | measured rate | spectral radius | iterations to 1e-6 | "
        "comm rounds to 1e-6 | final log10 subopt | diverged (seeds) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["table"]:

        def num(value: Any, fmt: str) -> str:
            return (
                "-"
                if value is None or (isinstance(value, float) and math.isnan(value))
                else format(value, fmt)
            )

        iterations = row["iterations_to_threshold"]
        not_reached = f"> {rounds}{_extrapolated(row, rounds)}"
        if row["algorithm"] == "one-shot":
            not_reached = "not reached (1 round)"
        lines.append(
            f"| {row['algorithm']} | {row['machines']} | {row['samples']} | "
            f"{num(row['mu'], 'g')} | {num(row['measured_rate'], '.4f')} | "
            f"{num(row['spectral_radius'], '.4f')} | "
            f"{num(iterations, 'g') if iterations is not None else not_reached} | "
            f"{num(row['comm_rounds_to_threshold'], 'g')} | "
            f"{num(row['final_log10_suboptimality'], '.2f')} | "
            f"{row['diverged']}/{row['seeds']} |"
        )
    return "\n".join(lines) + "\n"


def _extrapolated(row: dict[str, Any], rounds: int) -> str:
    """' (~T)': iterations to the threshold if the measured rate held on; '' if diverging."""
    rate, final = row["measured_rate"], row["final_log10_suboptimality"]
    if not (isinstance(rate, float) and 0 < rate < 1 and math.isfinite(final)):
        return ""
    more = (math.log10(THRESHOLD) - final) / (2 * math.log10(rate))
    return f" (~{rounds + math.ceil(more)})"


def plot(result: dict[str, Any], path: Path) -> None:
    """Suboptimality against iteration: rows = DANE's mu values (+ a row comparing the
    algorithms at the largest N), columns = m, one line per N (mean of log10 over seeds)."""

    plt = pyplot()

    cells = result["cells"]
    machines = sorted({c["machines"] for c in cells})
    mus = sorted({c["mu"] for c in cells if c["algorithm"] == "dane"})
    others = sorted({c["algorithm"] for c in cells} - {"dane"})
    num_rows = len(mus) + (1 if others else 0)
    fig, axes = plt.subplots(
        num_rows, len(machines), figsize=(4 * len(machines), 3.2 * num_rows), squeeze=False
    )
    samples = sorted({c["samples"] for c in cells})
    for r, mu in enumerate(mus):
        for j, m in enumerate(machines):
            ax = axes[r][j]
            for n in samples:
                group = [
                    c
                    for c in cells
                    if (c["algorithm"], c["machines"], c["samples"], c["mu"]) == ("dane", m, n, mu)
                ]
                if group:
                    ax.plot(_mean_curve(group), marker=".", label=f"N={n}")
            ax.set_title(f"DANE, m={m}, mu={mu:g}")
            _decorate(ax, result["threshold"])
    if others:
        n = samples[-1]
        for j, m in enumerate(machines):
            ax = axes[-1][j]
            for algorithm in ["dane", *others]:
                for mu in mus if algorithm == "dane" else [None]:
                    group = [
                        c
                        for c in cells
                        if c["algorithm"] == algorithm
                        and c["machines"] == m
                        and c["samples"] == n
                        and (mu is None or c["mu"] == mu)
                    ]
                    if group:
                        label = algorithm if mu is None else f"dane mu={mu:g}"
                        ax.plot(_mean_curve(group), marker=".", label=label)
            ax.set_title(f"algorithms, m={m}, N={n}")
            _decorate(ax, result["threshold"])
    fig.tight_layout()
    save_figure(fig, path)


def _mean_curve(group: list[dict[str, Any]]) -> list[float]:
    length = max(len(c["log10_suboptimality"]) for c in group)
    curve = []
    for t in range(length):
        values = [
            c["log10_suboptimality"][t]
            for c in group
            if t < len(c["log10_suboptimality"]) and c["log10_suboptimality"][t] is not None
        ]
        curve.append(float(np.mean(values)) if values else math.nan)
    return curve


def _decorate(ax: Any, threshold: float) -> None:
    ax.axhline(math.log10(threshold), color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("iteration")
    ax.set_ylabel("log10(f(w_t) - f(w*))")
    ax.set_ylim(bottom=-16)
    ax.legend(fontsize=7)
