"""Where a round's time goes when its compute is negligible (`dane bench scaling`'s fixed cost).

Three measurements, each from the run itself rather than assumed:

- `hop_latency`: what one dependent scheduling step costs on this cluster: a chain of trivial
  tasks, each pinned and depending on the last (worker -> scheduler -> worker per step), on
  one worker and alternating between two;
- `critical_path`: how many such steps a round's graph chains one after another (its longest
  dependency path to the update, counted on the graph graph.py builds for the run's
  placement);
- `round_timeline`: one round's tasks from Dask's task stream (start and stop per task), with
  how much of the round some worker was computing and how much all of them waited.

Together they explain a fixed cost: about (steps x hop latency) + each worker's serial task
time + the driver's scatter and gather.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from dask.utils import key_split
from distributed import wait

from ...pipeline.engine.run.bounded import cluster_identity
from .introspect import chained_dependencies, round_graph


def _increment(value: int) -> int:
    return value + 1


def _relay(value: Any) -> Any:
    return value


def hop_latency(
    client: Any, hops: int = 20, repeats: int = 3, *, payload_bytes: int = 0
) -> dict[str, float]:
    """Milliseconds per dependent step of a chain of pinned one-line tasks (median of repeats).

    With `payload_bytes`, also a chain of identity tasks alternating between two workers that
    passes a tensor of that size (the model's bytes): one hop of a round, the unit its fixed
    cost is counted in (`alternating_payload_ms`).
    """
    workers = sorted(cluster_identity(client)["workers"])
    result = {"same_worker_ms": _chain_ms(client, [workers[0]] * hops, repeats, _increment, 0)}
    if len(workers) > 1:
        alternating = [workers[i % 2] for i in range(hops)]
        result["alternating_ms"] = _chain_ms(client, alternating, repeats, _increment, 0)
        if payload_bytes:
            payload = torch.zeros(payload_bytes, dtype=torch.uint8)
            result["alternating_payload_ms"] = _chain_ms(
                client, alternating, repeats, _relay, payload
            )
            result["payload_bytes"] = payload_bytes
    return result


def _chain_ms(client: Any, path: list[str], repeats: int, step: Any, start: Any) -> float:
    per_step = []
    for _ in range(repeats):
        value = client.submit(step, start, workers=[path[0]], pure=False)
        value.result()  # the chain starts from data already on its first worker
        started = time.perf_counter()
        for worker in path:
            value = client.submit(step, value, workers=[worker], pure=False)
        wait([value])  # done on its worker: the last hop's result is not fetched
        per_step.append((time.perf_counter() - started) / len(path) * 1e3)
        del value
    return statistics.median(per_step)


def critical_path(dependencies: dict[str, set[str]], target: str) -> int:
    """Tasks on the longest dependency chain ending at `target` (dependent scheduling steps)."""
    depth: dict[str, int] = {}

    def depth_of(key: str) -> int:
        if key not in depth:  # graphs of a round are a few dozen tasks: recursion is fine
            inside = [d for d in dependencies[key] if d in dependencies]
            depth[key] = 1 + max((depth_of(d) for d in inside), default=0)
        return depth[key]

    return depth_of(target)


def round_timeline(stream: list[dict[str, Any]], round_index: int) -> dict[str, Any]:
    """Round `round_index`'s tasks from a task stream, times in ms from its first task's start."""
    tasks = []
    for record in stream:
        key = str(record["key"])
        parts = key.split("-")
        if key.startswith("load_") or len(parts) < 3 or parts[1] != str(round_index):
            continue  # the shard loads' keys carry a shard index where rounds carry theirs
        compute = [s for s in record["startstops"] if s["action"] == "compute"]
        if compute:
            span = (compute[0]["start"], compute[0]["stop"])
            tasks.append({"task": key_split(key), "worker": record["worker"], "span": span})
    if not tasks:
        return {}
    origin = min(t["span"][0] for t in tasks)
    end = max(t["span"][1] for t in tasks)
    workers = sorted({t["worker"] for t in tasks})
    intervals = sorted(t["span"] for t in tasks)
    return {
        "round": round_index,
        "tasks": len(tasks),
        "span_ms": (end - origin) * 1e3,
        "task_ms": sum(stop - start for start, stop in intervals) * 1e3,
        "busy_ms": _union_length(intervals) * 1e3,  # some worker computing
        "timeline": [
            {
                "task": t["task"],
                "worker": workers.index(t["worker"]),
                "start_ms": round((t["span"][0] - origin) * 1e3, 2),
                "stop_ms": round((t["span"][1] - origin) * 1e3, 2),
            }
            for t in sorted(tasks, key=lambda t: t["span"])
        ],
    }


def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by sorted (start, stop) intervals."""
    covered, reach = 0.0, float("-inf")
    for start, stop in intervals:
        if stop > reach:
            covered += stop - max(start, reach)
            reach = stop
    return covered


def tasks_per_round(setup: Any) -> int:
    """Tasks in one round's graph (evaluation excluded), counted on a built graph."""
    return len(dict(round_graph(setup, ["a", "b"])[0]))


def dependent_steps(setup: Any, workers: int) -> int:
    """Dependent scheduling steps a round adds to the chain of rounds with `workers` workers:
    how much deeper the third round's update lies than the second's, on three rounds chained
    as the driver chains them (a round may start on its own first task with the update of
    the round before, so a round's own graph alone would count that update twice)."""
    dependencies, updates = chained_dependencies(setup, [f"w{j}" for j in range(workers)])
    return critical_path(dependencies, updates[2]) - critical_path(dependencies, updates[1])
