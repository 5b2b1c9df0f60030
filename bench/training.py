"""Training-quality benchmarks: a list of training runs on one cluster, results as JSON.

A TOML file lists the runs: a `[defaults]` table of RunConfig settings shared by all, and one
`[[run]]` table per run (its `name` plus the settings that differ; `out` defaults to
`<workdir>/<name>`). The runs go one after another on one cluster (so none competes with
another for the CPUs, and the cluster starts once); each writes its usual run directory, and
the JSON holds every run's settings, summary and accuracy curve against communication rounds.

    python -m dask_dane.bench.training --configs runs.toml --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from pathlib import Path
from typing import Any

from ..pipeline.config import RunConfig, check_settings
from ..pipeline.metrics import read_metrics


def read_runs(path: str | Path, workdir: str | Path) -> list[tuple[str, RunConfig]]:
    """(name, validated config) of every [[run]] in the file, defaults applied."""
    data = tomllib.loads(Path(path).read_text())
    defaults = check_settings(data.get("defaults", {}), f"{path} [defaults]")
    runs = []
    for i, table in enumerate(data.get("run", [])):
        table = dict(table)
        name = table.pop("name", None)
        if not name:
            raise ValueError(f'{path}: [[run]] number {i + 1} has no name; add name = "..."')
        settings = {**defaults, **check_settings(table, f"{path} run {name!r}")}
        settings.setdefault("out", str(Path(workdir) / name))
        runs.append((name, RunConfig(**settings).validate()))
    if not runs:
        raise ValueError(f"{path} lists no [[run]] tables")
    return runs


def curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The evaluated rounds of a run: round, comm_rounds, bytes, wall time, loss, accuracy."""
    points, wall = [], 0.0
    for row in read_metrics(Path(run_dir) / "metrics.jsonl"):
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


def run_all(runs: list[tuple[str, RunConfig]], json_out: Path) -> list[dict]:
    """Train every run on one LocalCluster; rewrite `json_out` after each run."""
    from ..pipeline.cluster import make_client
    from ..pipeline.loop import train

    results: list[dict] = []
    with make_client(runs[0][1]) as client:
        for name, config in runs:
            started = time.perf_counter()
            try:
                summary = train(config, client=client)
                error = None
            except ValueError as err:  # a diverged run is a result too
                summary, error = {}, str(err)
            rows = read_metrics(Path(config.out) / "metrics.jsonl")
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
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(json.dumps(results, indent=1) + "\n")
            print(f"{name}: {summary.get('final_test_accuracy')} {error or ''}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", required=True, help="TOML file of [defaults] and [[run]]")
    parser.add_argument("--json", required=True, help="where to write the results")
    parser.add_argument("--workdir", default="bench-out/training", help="run directories")
    args = parser.parse_args()
    runs = read_runs(args.configs, args.workdir)
    run_all(runs, Path(args.json))


if __name__ == "__main__":
    main()
