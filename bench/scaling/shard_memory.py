"""`dane bench memory`: one store, its shards held three ways (`--shard-memory`), each on a
fresh cluster of the same workers: each worker's peak RSS and the images it trains on per
second (issue 36 item 4).

- converted: held in the run's dtype, normalised at load (how workers held shards before
  issue 36: a uint8 store's images took 4x their bytes);
- resident: held as stored (uint8 images stay uint8), converted per minibatch and per chunk;
- stream: read from the store a chunk at a time (datasets/rows/streamed.py).

Each way runs through the scaling benchmark's `run_workers` (run.py): the same warm-up round
left out, the same RSS trace and peak (memory.py). Throughput is the rows the run's rows say
a round trained on (full passes and local steps: `images`) over the round's wall time, as a
median over the measured rounds. A way the run refuses (a shard too large to hold) or a run
that fails is recorded with its one-line error, and the others still run: with workers
smaller than their shards that is the comparison's point. A worker that its nanny restarted
shows as an address missing at the end (`restarted`).
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from dask.sizeof import sizeof

from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import initial_weights, prepare_run
from ..common.specs import option, run_defaults, spec_record
from .spec import ScalingSpec

MODES = ("converted", "resident", "stream")


@dataclass(frozen=True, kw_only=True)
class MemorySpec:
    """One memory benchmark; see `dane bench memory --help`."""

    RUN_FLAGS: ClassVar = ("store", "model", "algorithm", "rounds", "local_steps",
                           "batch_size", "device", "dtype", "seed", "memory_limit")  # fmt: skip
    REQUIRED: ClassVar = ("store",)
    RUN_HELP: ClassVar = {
        "store": "Store to train on (written by `dane prepare`).",
        "rounds": "Rounds per way after a warm-up one; medians leave out the last.",
    }
    # Every row trains (no validation split): what each way holds is then the store's rows.
    run: RunConfig = field(
        default_factory=run_defaults(model="lenet", rounds=3, local_steps=20, batch_size=64,
                                     device="cpu", val_fraction=0.0)
    )  # fmt: skip
    workers: int = option(2, help="Workers of each cluster.")
    modes: tuple[str, ...] = option(MODES, help="Ways to hold shards, comma-separated.")
    workdir: str = option("bench-out/memory", help="Where the run directories go.")

    def validate(self) -> MemorySpec:
        unknown = [m for m in self.modes if m not in MODES]
        if not self.modes or unknown:
            raise ValueError(
                f"--modes must list some of {', '.join(MODES)} (got {','.join(self.modes)!r})"
            )
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1 (got {self.workers})")
        self.scaling(self.modes[0]).validate()  # store, model, rounds: one line with the fix
        return self

    def scaling(self, mode: str) -> ScalingSpec:
        """The scaling benchmark's spec of one way: its run on this spec's workers alone."""
        return ScalingSpec(
            run=replace(self.run, shard_memory=mode),
            workers=(self.workers,),
            reference=False,
            fixed_cost=False,
            workdir=str(Path(self.workdir) / mode),
        )


def run_memory(spec: MemorySpec, log: Any = print) -> dict[str, Any]:
    """Every way of `spec.modes` on a fresh cluster; returns the JSON-able result."""
    from .run import _machine, run_workers

    spec = spec.validate()
    shutil.rmtree(spec.workdir, ignore_errors=True)
    setup = prepare_run(spec.scaling(spec.modes[0]).config(spec.workers))
    model_bytes = sizeof(initial_weights(setup.spec, spec.run.seed))
    result: dict[str, Any] = {
        "spec": spec_record(spec),
        "machine": _machine(),
        "store_bytes": setup.store.num_train * _row_bytes(setup.store),
        "num_shards": setup.store.num_shards,
        "ways": [],
    }
    for mode in spec.modes:
        log(f"{mode} ...")
        try:
            run = run_workers(spec.scaling(mode), spec.workers, model_bytes)
        except (ValueError, OSError, RuntimeError) as err:  # refused, or the cluster gave up
            result["ways"].append({"mode": mode, "error": " ".join(str(err).split())})
            continue
        result["ways"].append(summarise(mode, run))
    return result


def _row_bytes(store: Any) -> int:
    import numpy as np

    return int(np.prod(store.sample_shape)) * np.dtype(store.x_dtype).itemsize


def summarise(mode: str, run: dict[str, Any]) -> dict[str, Any]:
    """One way's figures: per worker peak RSS and trace, the rounds' images per second."""
    rounds = run["rounds"]
    per_second = [r["images"] / r["wall_s"] for r in rounds if r["wall_s"] > 0]
    workers = [
        {
            "worker": row["worker"],
            "peak_mib": row["peak_mib"],
            "bare_mib": row["bare_mib"],
            "data_mib": row["data_mib"],
            "dask_held_mib": row["dask_held_mib"],
            "after_loads_mib": run["memory_trace"].get(row["worker"], {}).get("after_loads_mib"),
            "restarted": row["restarted"],
        }
        for row in run["memory"]
    ]
    return {
        "mode": mode,
        "workers": workers,
        "peak_mib": max(w["peak_mib"] for w in workers),
        "restarted": any(w["restarted"] for w in workers),
        "round_s": statistics.median(r["wall_s"] for r in rounds),
        "images_per_round": statistics.median(r["images"] for r in rounds),
        "images_per_s": statistics.median(per_second),
    }


def markdown_table(result: dict[str, Any]) -> str:
    """Each way, its peak beside the first way's (converted, by default)."""
    limit = result["spec"].get("memory_limit") or "Dask's default"
    lines = [
        f"store: {result['store_bytes'] / 2**20:.1f} MiB in {result['num_shards']} shards; "
        f"{result['spec']['workers']} workers, memory limit {limit}",
        "",
        "| shards held | peak RSS per worker (MiB) | peak / first | restarted | round (s) | "
        "images/s | images/s / first |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    ran = [w for w in result["ways"] if "error" not in w]
    first = ran[0] if ran else None
    for way in result["ways"]:
        if "error" in way:
            lines.append(f"| {way['mode']} | refused or failed: {way['error']} | | | | | |")
            continue
        peaks = " / ".join(f"{w['peak_mib']:.0f}" for w in way["workers"])
        lines.append(
            f"| {way['mode']} | {peaks} | {way['peak_mib'] / first['peak_mib']:.2f} | "
            f"{'yes' if way['restarted'] else 'no'} | {way['round_s']:.2f} | "
            f"{way['images_per_s']:.0f} | {way['images_per_s'] / first['images_per_s']:.2f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Peak RSS per worker (bars, the memory limit as a line) and images/s, per way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [w for w in result["ways"] if "error" not in w]
    fig, (memory_axes, speed_axes) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / max(result["spec"]["workers"], 1)
    for k in range(result["spec"]["workers"]):
        peaks = [w["workers"][k]["peak_mib"] if k < len(w["workers"]) else 0 for w in ran]
        xs = [i + (k - (result["spec"]["workers"] - 1) / 2) * width for i in range(len(ran))]
        memory_axes.bar(xs, peaks, width, label=f"worker {k}")
    limit = _limit_mib(result["spec"].get("memory_limit"))
    if limit:
        memory_axes.axhline(limit, color="black", linestyle="--", label="memory limit")
    memory_axes.set_xticks(range(len(ran)), [w["mode"] for w in ran])
    memory_axes.set_ylabel("peak RSS (MiB)")
    memory_axes.legend(fontsize="small")
    speed_axes.bar(range(len(ran)), [w["images_per_s"] for w in ran])
    speed_axes.set_xticks(range(len(ran)), [w["mode"] for w in ran])
    speed_axes.set_ylabel("images / s (median round)")
    fig.suptitle(f"{Path(result['spec']['store']).name}: shards held three ways")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _limit_mib(text: str | None) -> float | None:
    if not text:
        return None
    from dask.utils import parse_bytes

    return parse_bytes(text) / 2**20
