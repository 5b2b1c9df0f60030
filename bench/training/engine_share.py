"""The engine's share of a `dane train` run, timed from outside by when each row lands.

Runs a `dane train` command as a user would, watches its run directory's metrics.jsonl and
takes the moment each row appears (polled every millisecond), so the driver's own clock plays
no part. A round's wall is the time between two rows landing; the engine's share of it is
what the slowest worker's compute and the evaluation leave:
(wall - max_worker_compute_s - eval_s) / wall, its median over the rounds after warm-up.

    python -m dask_dane.bench.training.engine_share --out runs/share [-- dane train flags]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.001


def row_arrivals(command: list[str], metrics: Path) -> tuple[list[float], float]:
    """Run `command`; the monotonic time each line of `metrics` appeared, and the whole
    command's seconds."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    arrivals: list[float] = []
    while True:
        done = process.poll() is not None
        if metrics.exists():
            lines = metrics.read_bytes().count(b"\n")
            arrivals += [time.monotonic()] * (lines - len(arrivals))
        if done:
            break
        time.sleep(POLL_S)
    if process.returncode:
        raise SystemExit(f"the command failed ({process.returncode}): {' '.join(command)}")
    return arrivals, time.monotonic() - started


def engine_share(rows: list[dict[str, Any]], arrivals: list[float], skip: int = 2) -> dict:
    """Per round from `skip` + 1 on: the wall between rows landing, the slowest worker's
    compute, the evaluation, and the engine's share; their medians."""
    rounds = []
    for t in range(max(skip, 1), len(rows)):
        wall = arrivals[t] - arrivals[t - 1]
        compute = rows[t]["max_worker_compute_s"] or 0.0
        evaluation = rows[t].get("eval_s") or 0.0
        share = (wall - compute - evaluation) / wall
        rounds.append({"round": rows[t]["round"], "wall_s": wall, "share": share})
    return {
        "median_wall_s": statistics.median(r["wall_s"] for r in rounds),
        "median_compute_s": statistics.median(
            rows[r["round"] - 1]["max_worker_compute_s"] for r in rounds
        ),
        "median_share": statistics.median(r["share"] for r in rounds),
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the run directory (replaced)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("flags", nargs="*", help="more `dane train` flags, after --")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    # `dane train` as this interpreter runs it (python -m dask_dane is the `dane` command).
    command = [sys.executable, "-m", "dask_dane", "train", "--out", str(args.out), *args.flags]
    arrivals, whole = row_arrivals(command, args.out / "metrics.jsonl")
    rows = [json.loads(line) for line in (args.out / "metrics.jsonl").read_text().splitlines()]
    figures = {
        "command": " ".join(["dane", *command[3:]]),
        "whole_s": whole,
        **engine_share(rows, arrivals),
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    summary = {k: v for k, v in figures.items() if k != "rounds"}
    json.dump(summary, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
