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
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...datasets.store import open_store
from ...pipeline.engine.run.rundir import RunDir
from ...pipeline.setup.config import RunConfig
from ..common.specs import run_tables

SCHEDULER_KEYS = ("scheduler", "scheduler_file")


def read_runs(
    paths: str | Path | list[str | Path] | list[Path],
    workdir: str | Path,
    *,
    store: str | None = None,
    comm_rounds: int | None = None,
    cluster: dict[str, str] | None = None,
) -> list[tuple[str, RunConfig]]:
    """(name, validated config) of every [[run]] in the files (one or several, in turn),
    their defaults applied; a name given twice is refused (the runs share `workdir`).

    `store` replaces every run's store (one list of methods, raced on many partitions).
    `cluster` ({"scheduler": ADDRESS} or {"scheduler_file": FILE}) runs them all on a
    running scheduler of the user's instead of a started LocalCluster.
    `comm_rounds` gives every run the same budget of communication rounds: its `rounds`
    become the budget over the reductions one of its rounds takes (DANE's 2, FedAvg's 1).
    """
    if store is not None:
        open_store(store)  # a missing or broken --store is bad input, not a failed run each
    runs: list[tuple[str, RunConfig]] = []
    paths = [paths] if isinstance(paths, str | Path) else paths
    tables = [table for path in paths for table in run_tables(path, "--config")]
    names = [name for name, _ in tables]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"--config: runs named {', '.join(twice)} more than once; rename them")
    for name, settings in tables:
        settings.setdefault("out", str(Path(workdir) / name))
        if store is not None:
            settings["store"] = store
        if cluster:
            settings = {k: v for k, v in settings.items() if k not in SCHEDULER_KEYS}
            settings |= cluster
        config = RunConfig(**settings).validate()
        if comm_rounds is not None:
            per_round = len(config.strategy.phases)
            if comm_rounds < per_round:
                raise ValueError(
                    f"--comm-rounds {comm_rounds} is less than one round of run {name!r} "
                    f"({per_round} communication rounds); raise --comm-rounds"
                )
            config = replace(config, rounds=comm_rounds // per_round).validate()
        runs.append((name, config))
    return runs


def curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The evaluated rounds of a run: round, comm_rounds, bytes, wall time, loss, accuracy."""
    points, wall = [], 0.0
    for row in RunDir(Path(run_dir)).rows():
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
    from ...pipeline.launchers.cluster import make_client
    from ...pipeline.training import train

    results: list[dict[str, Any]] = []
    with make_client(runs[0][1]) as client:
        for name, config in runs:
            started = time.perf_counter()
            try:
                summary = train(config, client=client)
                error = None
            except ValueError as err:  # a diverged run is a result too
                summary, error = {}, str(err)
            rows = RunDir(Path(config.out)).rows()
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
    """One row per run: accuracy, communication rounds, bytes and time, safeguard rejections;
    then each run's accuracy at equal communication rounds (equal_rounds_table)."""
    lines = [
        "| run | final test accuracy | best | rounds | comm rounds | MB sent | wall (s) "
        "| rejections |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        s = run["summary"]
        last = run["curve"][-1] if run["curve"] else {}
        accuracy = s.get("final_test_accuracy")
        megabytes = last.get("cum_comm_bytes")
        lines.append(
            f"| {run['name']} | {_number(accuracy)} | {_number(s.get('best_test_accuracy'))} | "
            f"{s.get('rounds', '-')} | {last.get('comm_rounds', '-')} | "
            f"{_number(megabytes and megabytes / 1e6, '.1f')} | "
            f"{_number(s.get('total_wall_s'), '.1f')} | {run['safeguard_rejections']} |"
            + (f" {run['error']}" if run["error"] else "")
        )
    return "\n".join(lines) + "\n\n" + equal_rounds_table(result)


def equal_rounds_table(result: dict[str, Any], columns: int = 5) -> str:
    """Each run's test accuracy after c communication rounds, at `columns` values of c up to
    the longest run's: the last evaluation at or before c ('-' where there is none yet)."""
    longest = max((p["comm_rounds"] for run in result["runs"] for p in run["curve"]), default=0)
    if not longest:
        return ""
    marks = sorted({max(1, round(longest * (k + 1) / columns)) for k in range(columns)})
    lines = [
        "| run | " + " | ".join(f"{c} comm rounds" for c in marks) + " |",
        "|---|" + "---:|" * len(marks),
    ]
    for run in result["runs"]:
        cells = []
        for c in marks:
            reached = [p["test_accuracy"] for p in run["curve"] if p["comm_rounds"] <= c]
            cells.append(_number(reached[-1] if reached else None))
        lines.append(f"| {run['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _number(value: float | None, fmt: str = ".4f") -> str:
    return "-" if value is None else format(value, fmt)


def plot(result: dict[str, Any], path: Path) -> None:
    """Test accuracy of every run against communication rounds and wall time."""
    from ...pipeline.report import pyplot, save_figure

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
