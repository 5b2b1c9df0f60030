"""`dane bench train`: a list of training runs on one cluster, their curves side by side.

A TOML file lists the runs: a `[defaults]` table of `dane train` settings shared by all, and
one `[[run]]` table per run (its `name` plus the settings that differ; `out` defaults to
`<workdir>/<name>`). The runs go one after another on one cluster (so none competes with
another for the CPUs, and the cluster starts once); each writes its usual run directory, and
the result holds every run's settings, summary and accuracy curve against communication
rounds, written after each run (output.py), with a table and the curves as a figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..pipeline.config import RunConfig
from ..pipeline.metrics import read_metrics
from ..pipeline.rundir import RunDir
from .specs import run_tables


def read_runs(path: str | Path, workdir: str | Path) -> list[tuple[str, RunConfig]]:
    """(name, validated config) of every [[run]] in the file, defaults applied."""
    runs = []
    for name, settings in run_tables(path, "--configs"):
        settings.setdefault("out", str(Path(workdir) / name))
        runs.append((name, RunConfig(**settings).validate()))
    return runs


def curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The evaluated rounds of a run: round, comm_rounds, bytes, wall time, loss, accuracy."""
    points, wall = [], 0.0
    for row in read_metrics(RunDir(Path(run_dir)).metrics):
        wall += row["wall_s"]
        if row.get("test_accuracy") is not None:
            points.append(
                {
                    "round": row["round"],
                    "comm_rounds": row["comm_rounds"],
                    "cum_comm_bytes": row["cum_comm_bytes"],
                    "wall_s": round(wall, 2),
                    "train_loss": row["train_loss"],
                    "test_accuracy": row["test_accuracy"],
                    "safeguard_rejected": row.get("safeguard_rejected"),
                }
            )
    return points


def run_all(
    runs: list[tuple[str, RunConfig]],
    *,
    log: Callable[[str], None] = print,
    on_run: Callable[[dict[str, Any]], None] = lambda partial: None,
) -> dict[str, Any]:
    """Train every run on one cluster; `on_run` receives the result so far after each run."""
    from ..pipeline.cluster import make_client
    from ..pipeline.loop import train

    results: list[dict[str, Any]] = []
    with make_client(runs[0][1]) as client:
        for name, config in runs:
            started = time.perf_counter()
            try:
                summary = train(config, client=client)
                error = None
            except ValueError as err:  # a diverged run is a result too
                summary, error = {}, str(err)
            rows = read_metrics(RunDir(Path(config.out)).metrics)
            results.append(
                {
                    "name": name,
                    "config": config.as_dict(),
                    "summary": summary,
                    "error": error,
                    "seconds": round(time.perf_counter() - started, 1),
                    "safeguard_rejections": int(
                        sum(r.get("safeguard_rejected") or 0 for r in rows)
                    ),
                    "curve": curve(config.out),
                }
            )
            on_run({"runs": list(results)})
            log(f"{name}: {summary.get('final_test_accuracy')} {error or ''}")
    return {"runs": results}


def markdown_table(result: dict[str, Any]) -> str:
    """One row per run: accuracy, communication rounds and time, safeguard rejections."""
    lines = [
        "| run | final test accuracy | best | rounds | comm rounds | wall (s) | rejections |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        s = run["summary"]
        last = run["curve"][-1] if run["curve"] else {}
        accuracy = s.get("final_test_accuracy")
        lines.append(
            f"| {run['name']} | {_number(accuracy)} | {_number(s.get('best_test_accuracy'))} | "
            f"{s.get('rounds', '-')} | {last.get('comm_rounds', '-')} | "
            f"{_number(s.get('total_wall_s'), '.1f')} | {run['safeguard_rejections']} |"
            + (f" {run['error']}" if run["error"] else "")
        )
    return "\n".join(lines)


def _number(value: float | None, fmt: str = ".4f") -> str:
    return "-" if value is None else format(value, fmt)


def plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy of every run against communication rounds and wall time."""
    from ..pipeline.report import pyplot, save_figure

    fig, (by_rounds, by_time) = pyplot().subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for run in result["runs"]:
        points = run["curve"]
        accuracy = [p["test_accuracy"] for p in points]
        by_rounds.plot([p["comm_rounds"] for p in points], accuracy, marker=".", label=run["name"])
        by_time.plot([p["wall_s"] for p in points], accuracy, marker=".", label=run["name"])
    by_rounds.set_xlabel("communication rounds")
    by_time.set_xlabel("wall time (s)")
    by_rounds.set_ylabel("test accuracy")
    for panel in (by_rounds, by_time):
        panel.grid(alpha=0.3)
    by_rounds.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
