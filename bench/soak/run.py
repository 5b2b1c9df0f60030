"""`dane bench soak`: many rounds on a small store, watching for leaks and drift.

After every round it records the driver's and the workers' resident memory, the tasks left on
the scheduler and the futures the client holds (once the round's release messages have been
processed), and the round's wall time. A healthy run holds exactly one future per shard plus
the test split between rounds, no task of a round already recorded, and at most the rounds the
driver has submitted ahead (pipelined.py keeps one ahead of the one it records); its memory
and round times stay flat after warm-up.

The cluster runs with distributed's fixed-length logs shortened (SOAK_DASK_CONFIG), so that
they are full before the warm-up ends and the growth measured after it is growth that would
not stop; and worker memory is read by process id, so that the soak adds nothing to it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask.config

from ...pipeline.engine.run.callbacks import Callbacks
from ...pipeline.launchers.cluster import make_client
from ...pipeline.setup.run_setup import prepare_store
from ...pipeline.training import train
from ..common.specs import spec_record
from .spec import SoakSpec

if TYPE_CHECKING:
    from distributed import Client

SETTLE_S = 2.0  # how long a round's released keys may take to leave the scheduler
LIMIT_GROWTH_PCT = 5.0
LIMIT_DRIFT = 1.2  # final-window median round time over the post-warm-up one
# Distributed keeps logs of fixed length: per worker the transfer logs, the state machine's
# transition and stimulus logs (`low-level-log-length` entries each) and the profiler's
# history (as many `profile.cycle`s); on the scheduler the transition log. Each grows until
# full, then stays flat. At the defaults (1000 entries, 1 s cycles) the profiles fill for
# 1000 s: a 300-round soak ended before that and read it as a 5 % leak (in a 1500 s run the
# workers grew until 1000 s, then stayed flat). Here they are full within the warm-up.
SOAK_DASK_CONFIG = {
    "distributed.admin.low-level-log-length": 20,
    "distributed.worker.profile.cycle": "100ms",
}


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _task_keys(dask_scheduler) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(key) for key in dask_scheduler.tasks]


def _round_of(key: str) -> int | None:
    """The round a task belongs to: the engine's round keys read `<name>-<round>-...`
    (pipeline/engine/round/graph.py); None for the run's data (`load_...`), a torch
    segment's task (`segment-<first round>-...`, held while its rounds run) and any
    other."""
    name, _, rest = key.partition("-")
    index = rest.split("-", 1)[0]
    held = name.startswith("load_") or name == "segment"
    return int(index) if index.isdigit() and not held else None


def census(keys: list[str], recorded: int) -> dict[str, int]:
    """Keys held after round `recorded`: the rest (data), the recorded round's updates (the
    carry: the round after the one in flight makes its own start from them, inline), those
    of rounds already recorded otherwise (stale: a leak), and how many later rounds are in
    flight."""
    rounds = [_round_of(key) for key in keys]
    carry = [
        r == recorded and key.startswith("update-") for key, r in zip(keys, rounds, strict=True)
    ]
    return {
        "other": sum(r is None for r in rounds),
        "carry": sum(carry),
        "stale": sum(
            r is not None and r <= recorded and not c for r, c in zip(rounds, carry, strict=True)
        ),
        "ahead": len({r for r in rounds if r is not None and r > recorded}),
    }


def _log_fill(dask_worker) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """[entries held, entries kept] of each of the worker's fixed-length logs."""
    logs = {
        "profile_history": dask_worker.profile_history,
        "transfer_incoming_log": dask_worker.transfer_incoming_log,
        "transfer_outgoing_log": dask_worker.transfer_outgoing_log,
        "state_log": dask_worker.state.log,
        "stimulus_log": dask_worker.state.stimulus_log,
    }
    return {name: [len(log), log.maxlen] for name, log in logs.items()}


def _wait_for_full_logs(client: Client, timeout_s: float = 10.0) -> dict[str, Any]:
    """The workers' log fill, once every log is full (or timeout_s has passed).

    The profile history fills with wall time (one entry a `profile.cycle`), not with rounds:
    a fast warm-up can end before it is full, and its filling would then count as growth.
    """
    deadline = time.perf_counter() + timeout_s
    fill = client.run(_log_fill)
    while not _all_full(fill) and time.perf_counter() < deadline:
        time.sleep(0.1)
        fill = client.run(_log_fill)
    return fill


def _all_full(fill: dict[str, dict[str, list[int]]]) -> bool:
    return all(held == kept for logs in fill.values() for held, kept in logs.values())


def _workers_rss(pids: list[int]) -> int:
    """Summed resident memory of the local worker processes.

    Read here by process id rather than with `client.run`: every `client.run` appends a line
    to each worker's log (10 000 lines kept), memory that only the soak would cause.
    """
    import psutil

    return sum(psutil.Process(pid).memory_info().rss for pid in pids)


def run_soak(spec: SoakSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train spec.run.rounds rounds on one cluster, sampling after each; returns the figures."""
    workdir = Path(spec.workdir)
    config = spec.config(workdir)
    prepare_store("digits", config.store, shards=config.workers, seed=config.seed)
    shutil.rmtree(config.out, ignore_errors=True)
    expected = 2 * config.workers  # the held futures: one per shard, and its scoring piece
    # Under the torch collective a segment's task per worker runs while rounds are recorded,
    # and its rounds run ahead of the driver: nothing to wait for after a round.
    torch_rounds = config.collective == "torch"
    expected += config.workers if torch_rounds else 0
    settle_s = 0.0 if torch_rounds else SETTLE_S
    samples: list[dict[str, Any]] = []
    logs_at_warmup: dict[str, Any] = {}  # full, if SOAK_DASK_CONFIG does what it says
    with dask.config.set(SOAK_DASK_CONFIG), make_client(config) as client:
        pids = list(client.run(os.getpid).values())

        def on_round(row: dict[str, Any]) -> None:
            started, t = time.perf_counter(), row["round"]
            tasks = census(client.run_on_scheduler(_task_keys), t)
            while (tasks["other"] > expected or tasks["stale"]) and (
                time.perf_counter() - started < settle_s
            ):
                time.sleep(0.01)
                tasks = census(client.run_on_scheduler(_task_keys), t)
            futures = census([str(key) for key in client.futures], t)
            samples.append(
                {
                    "round": t,
                    "wall_s": row["wall_s"],
                    "driver_rss": _rss(),
                    "worker_rss": _workers_rss(pids),
                    "scheduler_tasks": tasks["other"],
                    "stale_tasks": tasks["stale"],
                    "carry_tasks": tasks["carry"],
                    "rounds_ahead": tasks["ahead"],
                    "client_futures": futures["other"],
                    "stale_futures": futures["stale"],
                    "settle_s": time.perf_counter() - started,
                }
            )
            if row["round"] == spec.warmup:
                logs_at_warmup.update(_wait_for_full_logs(client))
            if row["round"] % 50 == 0:
                log(f"round {row['round']}: {row['wall_s'] * 1e3:.0f} ms")

        started = time.perf_counter()
        train(config, client=client, callbacks=Callbacks(on_round=on_round))
        total_s = time.perf_counter() - started
    return {
        "spec": spec_record(spec),
        "dask_config": SOAK_DASK_CONFIG,
        "logs_at_warmup": logs_at_warmup,
        "expected_tasks": expected,
        "total_s": total_s,
        "summary": summarize(samples, warmup=spec.warmup, expected=expected),
        "samples": samples,
    }


def summarize(samples: list[dict[str, Any]], *, warmup: int, expected: int) -> dict[str, Any]:
    """Growth and drift between the first and last tenth of the rounds after warm-up."""
    after = samples[warmup:]
    width = max(5, len(after) // 10)
    first, last = after[:width], after[-width:]

    def growth(key: str) -> float:
        base = statistics.median(s[key] for s in first)
        return 100.0 * (statistics.median(s[key] for s in last) - base) / base

    def slope(key: str) -> float:
        """Bytes a round: Theil-Sen (the median of the pairwise slopes), which one jump of
        the allocator does not move, where a leak of a fixed size a round does."""
        points = [(s["round"], s[key]) for s in after]
        pairs = itertools.combinations(points, 2)
        return statistics.median((b[1] - a[1]) / (b[0] - a[0]) for a, b in pairs)

    first_wall = statistics.median(s["wall_s"] for s in first)
    last_wall = statistics.median(s["wall_s"] for s in last)
    # After the warm-up: a torch segment's first rounds run while the start-up's last keys
    # (which the Dask form's settling waits out) are released.
    leftover = [s["scheduler_tasks"] - expected + s["stale_tasks"] for s in after]
    extra_futures = [s["client_futures"] - expected + s["stale_futures"] for s in after]
    result = {
        "driver_rss_mib": [_mib(first, "driver_rss"), _mib(last, "driver_rss")],
        "worker_rss_mib": [_mib(first, "worker_rss"), _mib(last, "worker_rss")],
        "driver_growth_pct": growth("driver_rss"),
        "worker_growth_pct": growth("worker_rss"),
        "driver_bytes_per_round": slope("driver_rss"),
        "worker_bytes_per_round": slope("worker_rss"),
        "round_ms": [first_wall * 1e3, last_wall * 1e3],
        "round_time_drift": last_wall / first_wall,
        "max_leftover_tasks": max(leftover),
        "rounds_with_leftover_tasks": sum(n > 0 for n in leftover),
        "max_extra_futures": max(extra_futures),
        "max_rounds_ahead": max(s["rounds_ahead"] for s in samples),
    }
    result["ok"] = (
        result["driver_growth_pct"] < LIMIT_GROWTH_PCT
        and result["worker_growth_pct"] < LIMIT_GROWTH_PCT
        and result["max_leftover_tasks"] <= 0
        and result["max_extra_futures"] <= 0
        and result["round_time_drift"] < LIMIT_DRIFT
    )
    return result


def _mib(samples: list[dict[str, Any]], key: str) -> float:
    return statistics.median(s[key] for s in samples) / 2**20


def markdown_table(result: dict[str, Any]) -> str:
    """The figures as a short Markdown table (first vs last tenth after warm-up)."""
    s = result["summary"]
    rows = [
        ("driver RSS (MiB)", *s["driver_rss_mib"], f"{s['driver_growth_pct']:+.2f} %"),
        ("workers' RSS, sum (MiB)", *s["worker_rss_mib"], f"{s['worker_growth_pct']:+.2f} %"),
        ("round time (ms, median)", *s["round_ms"], f"x{s['round_time_drift']:.3f}"),
    ]
    lines = [
        "| measure | first tenth | last tenth | change |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {a:.1f} | {b:.1f} | {change} |" for name, a, b, change in rows),
        f"| tasks left on the scheduler after a round (max beyond the {result['expected_tasks']} "
        f"held) | | | {s['max_leftover_tasks']} |",
        f"| extra futures held by the client (max) | | | {s['max_extra_futures']} |",
    ]
    verdict = "PASS" if s["ok"] else "FAIL"
    spec = result["spec"]
    lines.append(
        f"\n{verdict}: {spec['rounds']} rounds ({spec['warmup']} warm-up) of {spec['algorithm']} "
        f"/ {spec['model']} on {spec['workers']} workers in {result['total_s']:.0f} s"
    )
    return "\n".join(lines)
