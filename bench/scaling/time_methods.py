"""What `dane bench time-to-accuracy` projects from (time_to_accuracy.py has the model): the
engine's fixed cost of a round, and each method's measured rows of a `dane bench shards` run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..ddp.projection import model_copies
from ..network.model import (
    ALLGATHER_FORMS,
    Network,
    allgather_round_comm_s,
    ring_allreduce_s,
    tree_depth,
)
from ..network.model import dask_round_comm_s as comm_s


@dataclass(frozen=True, kw_only=True)
class FixedCost:
    """The engine's cost of a round with no compute (see the module docstring)."""

    measured_s: dict[int, float]  # workers -> seconds per round
    step_s: float  # one dependent scheduling step between workers
    steps_per_level: int  # dependent steps a round gains per level of the reduction tree
    # The measured rounds' form: the all-gather form's dependent steps do not grow with W
    # (its bytes do, in the network term); the per-round form's grow per tree level.
    form: str = "tree"

    def seconds(self, workers: int) -> float:
        if workers in self.measured_s:
            return self.measured_s[workers]
        base = max((w for w in self.measured_s if w < workers), default=min(self.measured_s))
        if self.form in ALLGATHER_FORMS:
            return self.measured_s[base]
        levels = tree_depth(workers) - tree_depth(base)
        return self.measured_s[base] + self.steps_per_level * levels * self.step_s

    def comm_s(self, net: Network, workers: int, payloads: list[float]) -> float:
        """The bytes' time on `net` a round, in the measured form."""
        if self.form in ALLGATHER_FORMS:
            return allgather_round_comm_s(net, workers, payloads)
        return comm_s(net, workers, payloads, payloads)


def fixed_cost_from(scaling: dict[str, Any]) -> FixedCost:
    """FixedCost from a `dane bench scaling` result; worker counts above its machine's cores
    (oversubscribed, so slowed by the sharing) are left out where fewer were measured."""
    rows = scaling.get("fixed_cost") or []
    if not rows:
        raise ValueError(
            "the --fixed-cost JSON has no fixed_cost rows; make it with `dane bench scaling` "
            "without --no-fixed-cost"
        )
    cores = scaling.get("machine", {}).get("cpu_count") or max(r["workers"] for r in rows)
    rows = [r for r in rows if r["workers"] <= cores] or rows
    steps = {r["workers"]: r["dependent_steps"] for r in rows}
    low, high = min(steps), max(steps)
    per_level = scaling.get("phases", 2)
    if tree_depth(high) > tree_depth(low):
        per_level = round((steps[high] - steps[low]) / (tree_depth(high) - tree_depth(low)))
    hops = [r["hop"].get("alternating_ms", r["hop"]["same_worker_ms"]) for r in rows]
    return FixedCost(
        measured_s={r["workers"]: r["ms_per_round"] / 1e3 for r in rows},
        step_s=max(hops) / 1e3,
        steps_per_level=per_level,
        form=rows[-1].get("round_form", "tree"),  # JSONs before issue 32: the per-round form
    )


def to_target(curve: list[dict[str, Any]], key: str, target: float) -> int | None:
    """The first round (or step, `key`) whose test accuracy reached `target`."""
    hit = next((p for p in curve if (p["test_accuracy"] or 0.0) >= target), None)
    return hit[key] if hit else None


@dataclass(frozen=True, kw_only=True)
class DaskMethod:
    """One dask-dane run of the sweep (one m), as the projection needs it."""

    name: str
    shards: int
    curve: list[dict[str, Any]]
    compute_s: float  # median over rounds: the slowest worker's compute
    workers: int  # W0: workers that held the shards
    phases: int
    payload_bytes: float  # one phase's input (and one partial sum), bytes

    def iteration_s(self, net: Network, workers: int, speedup: float, fixed: FixedCost) -> float:
        payloads = [self.payload_bytes] * self.phases
        compute = self.compute_s / speedup * self.workers / workers
        return compute + fixed.seconds(workers) + fixed.comm_s(net, workers, payloads)

    def time_s(self, target: float, net: Network, speedup: float, fixed: FixedCost) -> float | None:
        iterations = to_target(self.curve, "round", target)
        if iterations is None:
            return None
        return iterations * self.iteration_s(net, self.shards, speedup, fixed)


@dataclass(frozen=True, kw_only=True)
class DdpMethod:
    """One DDP row of the sweep: m ranks of batch B."""

    name: str
    shards: int
    curve: list[dict[str, Any]]
    rank_step_s: float
    grad_bytes: int

    def time_s(self, target: float, net: Network, speedup: float, fixed: FixedCost) -> float | None:
        steps = to_target(self.curve, "step", target)
        if steps is None:
            return None
        return steps * (
            self.rank_step_s / speedup + ring_allreduce_s(net, self.shards, self.grad_bytes)
        )


def dask_methods(runs: list[dict[str, Any]], name: str) -> list[DaskMethod]:
    """The sweep's rows of one dask-dane method, each with its measured timing."""
    if any("timing" not in run for run in runs):
        raise ValueError(
            "the shards JSON has no per-round timing (made before issue 25); run `dane bench "
            "shards` again to project it"
        )
    spread = [run for run in runs if run["timing"]["workers"] > 1]
    if not spread:
        raise ValueError("the shards JSON has no run on 2 or more workers to size the payloads")
    payload = statistics.median(
        statistics.median(run["timing"]["comm_bytes"]) / _copies(run["timing"]) for run in spread
    )
    return [
        DaskMethod(
            name=name,
            shards=run["shards"],
            curve=run["curve"],
            compute_s=statistics.median(run["timing"]["round_compute_s"]),
            workers=run["timing"]["workers"],
            phases=run["timing"]["phases"],
            payload_bytes=payload,
        )
        for run in runs
    ]


def _copies(timing: dict[str, Any]) -> int:
    """Model-sized copies a measured round moved: the all-gather form's W - 1 per worker and
    phase (blocks of shards: one subtree a worker), else the per-round form's (comm.py)."""
    phases, workers = timing["phases"], timing["workers"]
    if timing.get("round_form") in ALLGATHER_FORMS:
        return phases * workers * (workers - 1)
    return model_copies(phases, workers)


def rank_step_from(single: dict[str, Any], batch_size: int, model: str) -> float:
    """One DDP rank's compute per step, from a `dane bench single --threads 1` run at the
    rank's batch: its training clock (evaluation left out) over its steps."""
    spec = single.get("spec", {})
    if (
        single.get("threads") != 1
        or spec.get("batch_size") != batch_size
        or spec.get("model") != model
    ):
        raise ValueError(
            f"--ddp-step must be a `dane bench single` JSON of {model} with --threads 1 and "
            f"--batch-size {batch_size} (a rank's batch), not threads {single.get('threads')}, "
            f"batch {spec.get('batch_size')}, model {spec.get('model')}"
        )
    return single["train_wall_s"] / single["steps"]


def ddp_methods(runs: list[dict[str, Any]], rank_step_s: float) -> list[DdpMethod]:
    return [
        DdpMethod(
            name="ddp",
            shards=run["shards"],
            curve=run["curve"],
            rank_step_s=rank_step_s,
            grad_bytes=run["grad_bytes"],
        )
        for run in runs
    ]
