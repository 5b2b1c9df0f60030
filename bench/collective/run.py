"""`dane bench collective`: `--collective dask` beside `--collective torch`, in one run.

Each repeat runs `dane bench scaling` (bench/scaling/run.py) once per collective, the order
alternating between repeats, for two configurations:
- DANE: its fixed cost, a round of the tiny logistic model on the store's 8 shards, in ms,
  in hops of this machine's Dask (a dependent task passing the benchmark model's bytes) and
  in gloo all-gathers of the same bytes, both measured on the same cluster in the same run;
- FedAvg: the same fixed cost, and a round of `--wide-model` (ResNet-18's 46.7 MB of weights,
  one local step: the round's moving of weights, not its compute).
The FedAvg fixed costs then project the scaling recipe's time to 88 % on m = 1, 2, 4, 8
workers at 1x and 100x compute (`dane bench time-to-accuracy`'s model, the `--sweep` runs).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..common.specs import default_run
from ..network.model import Network
from ..scaling.run import run_scaling
from ..scaling.spec import ScalingSpec
from ..scaling.time_to_accuracy import project_sweep

COLLECTIVES = ("dask", "torch")
# The projection's network: the scaling recipe's page projects onto 10 Gbit/s.
PROJECTED_NETWORK = Network(bandwidth_gbps=10.0, latency_ms=0.05)
SPEEDUPS = (1.0, 100.0)


def _specs(
    store: str, model: str, wide_model: str, workers: tuple[int, ...], workdir: Path
) -> dict[str, ScalingSpec]:
    """The configurations, as `dane bench scaling` specs (no reference runs): DANE's and
    FedAvg's fixed costs with `model` (its bytes the hop's and the all-gather's), and
    FedAvg's round at `wide_model`'s size (no fixed cost: its hop would pass 46.7 MB)."""
    base = replace(default_run(ScalingSpec), store=store, model=model, rounds=2, local_steps=1)
    common = dict(reference=False, workdir=str(workdir))
    specs = {
        "dane": ScalingSpec(run=replace(base, algorithm="dane"), workers=(2,), **common),
        "fedavg": ScalingSpec(run=replace(base, algorithm="fedavg"), workers=workers, **common),
    }
    if wide_model:
        wide = replace(base, model=wide_model, algorithm="fedavg", rounds=12, batch_size=32)
        specs["wide"] = ScalingSpec(run=wide, workers=(2,), fixed_cost=False, **common)
    return specs


def run_collective(
    *,
    store: str,
    model: str,
    wide_model: str,
    workers: tuple[int, ...],
    repeats: int,
    sweeps: list[dict[str, Any]],
    workdir: Path,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every repeat of both configurations under both collectives, then the summary."""
    specs = _specs(store, model, wide_model, workers, workdir)
    runs = []
    for repeat in range(repeats):
        order = COLLECTIVES if repeat % 2 == 0 else tuple(reversed(COLLECTIVES))
        for collective in order:
            for name, spec in specs.items():
                log(f"repeat {repeat + 1}: {name}, --collective {collective} ...")
                spec = replace(spec, run=replace(spec.run, collective=collective))
                scaling = run_scaling(spec.validate(), log=lambda _: None)
                runs.append({"repeat": repeat, "collective": collective, "config": name,
                             "scaling": scaling})  # fmt: skip
    result: dict[str, Any] = {
        "repeats": repeats,
        "runs": runs,
        "summary": _summary(runs),
        "wide": _wide(runs),
    }
    if sweeps:
        result["projection"] = {c: _projection(sweeps, runs, c) for c in COLLECTIVES}
    return result


def _fixed(run: dict[str, Any], workers: int) -> dict[str, Any]:
    return next(f for f in run["scaling"]["fixed_cost"] if f["workers"] == workers)


def _summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration and collective, the medians over repeats at 2 workers."""
    rows = []
    for config in ("dane", "fedavg"):
        for collective in COLLECTIVES:
            mine = [r for r in runs if r["config"] == config and r["collective"] == collective]
            if not mine:
                continue
            fixed = [_fixed(r, 2) for r in mine]
            rounds = [next(w for w in r["scaling"]["runs"] if w["workers"] == 2) for r in mine]
            rows.append({
                "config": config,
                "collective": collective,
                "round_form": fixed[0]["round_form"],
                "fixed_ms": statistics.median(f["ms_per_round"] for f in fixed),
                # What the engine adds to the shards' own work: the round less its compute.
                "engine_ms": statistics.median(
                    max(f["ms_per_round"] - f["compute_ms"], 0.0) for f in fixed
                ),
                "hop_ms": statistics.median(f["hop_ms"] for f in fixed),
                "allgather_ms": statistics.median(f["gloo"]["raw_ms"] for f in fixed),
                "fixed_hops": statistics.median(f["fixed_cost_hops"] for f in fixed),
                "fixed_allgathers": statistics.median(f["fixed_cost_allgathers"] for f in fixed),
                "engine_hops": statistics.median(
                    max(f["ms_per_round"] - f["compute_ms"], 0.0) / f["hop_ms"] for f in fixed
                ),
                "payload_bytes": fixed[0]["gloo"]["payload_bytes"],
                "model": mine[0]["scaling"]["spec"]["model"],
                "model_bytes": mine[0]["scaling"]["model_bytes"],
                "round_s": statistics.median(r["median"]["wall_s"] for r in rounds),
            })  # fmt: skip
    return rows


def _wide(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """FedAvg's round at the wide model's size, per collective: the median over repeats of
    each run's median round, on 2 workers."""
    rows = []
    for collective in COLLECTIVES:
        mine = [r for r in runs if r["config"] == "wide" and r["collective"] == collective]
        if mine:
            walls = [r["scaling"]["runs"][0]["median"]["wall_s"] for r in mine]
            rows.append({
                "collective": collective,
                "model": mine[0]["scaling"]["spec"]["model"],
                "model_bytes": mine[0]["scaling"]["model_bytes"],
                "round_s": statistics.median(walls),
                "rounds_s": walls,
            })  # fmt: skip
    return rows


def _projection(
    sweeps: list[dict[str, Any]], runs: list[dict[str, Any]], collective: str
) -> dict[str, Any]:
    """The recipe's speed-ups to 88 % from the last FedAvg fixed cost of `collective`: as
    measured (`dane bench time-to-accuracy`'s fixed cost, the tiny model's own compute in
    it), and from the engine's share alone (the round less its slowest worker's compute,
    which the projection already counts, scaled, in the network's)."""
    last = [r for r in runs if r["config"] == "fedavg" and r["collective"] == collective][-1]
    scaling = last["scaling"]
    engine = {
        **scaling,
        "fixed_cost": [
            {**row, "ms_per_round": max(row["ms_per_round"] - row["compute_ms"], 0.0)}
            for row in scaling["fixed_cost"]
        ],
    }
    return {"as_measured": _speedups(sweeps, scaling), "engine_only": _speedups(sweeps, engine)}


def _speedups(sweeps: list[dict[str, Any]], scaling: dict[str, Any]) -> dict[str, Any]:
    projected = project_sweep(
        sweeps, scaling, targets=(0.88,), networks=(PROJECTED_NETWORK,), speedups=SPEEDUPS
    )
    speedups = {}
    for table in projected["projections"]:
        rows = next(iter(table["methods"].values()))
        speedups[f"{table['compute_speedup']:g}x"] = {r["shards"]: r["speedup"] for r in rows}
    return {"fixed_cost": projected["fixed_cost"], "speedups": speedups}
