"""What a round of `dane bench scaling` is set against: the same round in the single-process
reference, the fixed cost of a round with negligible compute, and projections onto networks."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from dask.sizeof import sizeof

from ...pipeline.setup.run_setup import initial_weights, prepare_run
from ..network.model import PROJECTED_WORKERS, measure_loopback, project_dask_round_s
from .profile import dependent_steps, tasks_per_round

# The specs here are run.py's ScalingSpec; run.py imports this module, so they are typed Any
# (an import back would be a cycle).


def reference_rounds(spec: Any) -> dict[str, Any]:
    """The same rounds by pipeline/engine/reference.py, in this process, on one thread."""
    from ...pipeline.engine.reference import run_reference

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        setup = prepare_run(spec.config(1))
        run = run_reference(setup, rounds=spec.run.rounds + 1, num_workers=1)
    finally:
        torch.set_num_threads(threads)
    walls = [h["wall_s"] for h in run.history][1:-1]
    return {"rounds_s": walls, "median_s": statistics.median(walls)}


def fixed_cost(
    spec: Any, workdir: Path, run_workers: Callable[..., dict[str, Any]]
) -> list[dict[str, Any]]:
    """Round time with negligible compute: logistic regression on 8 tiny shards, each
    worker count trained by `run_workers` (run.py's)."""
    from ...pipeline.setup.run_setup import prepare_store

    shards = prepare_run(spec.config(1)).store.num_shards
    store = workdir / f"tiny-{shards}.zarr"
    seed = spec.run.seed
    prepare_store("digits-tabular", store, shards=shards, seed=seed, replace=True)
    tiny_run = replace(
        spec.run,
        store=str(store),
        model="logistic",
        local_steps=1,
        batch_size=8,
        grad_sample=0,
        device="cpu",
        dtype="float64",  # the digits-tabular store holds float64 features
        rounds=max(spec.run.rounds, 20),
    )
    tiny = replace(spec, run=tiny_run, workdir=str(workdir / "tiny"))
    tiny_setup = prepare_run(tiny.config(1))
    # A hop is counted passing the benchmark's own model (not the tiny one): a round's unit.
    hop_bytes = sizeof(initial_weights(prepare_run(spec.config(1)).spec, seed))
    model_bytes = sizeof(initial_weights(tiny_setup.spec, seed))
    tasks = tasks_per_round(tiny_setup)
    results = []
    for workers in spec.workers:
        run = run_workers(
            tiny, workers, model_bytes, profile_round=tiny_run.rounds // 2, hop_bytes=hop_bytes
        )
        median = run["median"]
        hop = run["profile"]["hop"]
        hop_ms = hop.get("alternating_payload_ms", hop["same_worker_ms"])
        results.append(
            {
                "workers": workers,
                "shards": shards,
                "ms_per_round": median["wall_s"] * 1e3,
                "ms_per_task": median["wall_s"] * 1e3 / tasks,
                "tasks_per_round": tasks,
                "compute_ms": median["compute_s"] * 1e3,
                "driver_ms": median["driver_s"] * 1e3,
                "overhead_ms": median["overhead_s"] * 1e3,
                "dependent_steps": dependent_steps(tiny_setup, workers),
                "round_form": run["round_form"],
                # The round's fixed cost in hops of this machine, measured in the same run.
                "hop_ms": hop_ms,
                "fixed_cost_hops": median["wall_s"] * 1e3 / hop_ms,
                # ... and in the gloo group's own all-gathers of the same bytes.
                "fixed_cost_allgathers": median["wall_s"] * 1e3 / run["profile"]["gloo"]["raw_ms"],
                **run["profile"],
            }
        )
    return results


def projection(result: dict[str, Any], spec: Any) -> dict[str, Any]:
    """Round times on loopback (checked against the measured rounds) and on `networks`."""
    loopback = measure_loopback()
    fixed = {f["workers"]: f["ms_per_round"] / 1e3 for f in result.get("fixed_cost", [])}
    phases, model_bytes = result["phases"], result["model_bytes"]
    payload = [model_bytes] * phases
    check = []
    for run in result["runs"]:
        w, median = run["workers"], run["median"]
        projected = project_dask_round_s(
            loopback,
            workers=w,
            measured_workers=w,
            compute_s=median["compute_s"],
            fixed_s=fixed.get(w, median["driver_s"] + median["overhead_s"]),
            phase_inputs=payload,
            phase_outputs=payload,
        )
        check.append(
            {
                "workers": w,
                "measured_s": median["wall_s"],
                "projected_s": projected,
                "error_pct": 100 * (projected - median["wall_s"]) / median["wall_s"],
            }
        )
    last = result["runs"][-1]
    networks = []
    for net in spec.networks:
        rows = []
        for w in PROJECTED_WORKERS:
            rows.append(
                {
                    "workers": w,
                    "round_s": project_dask_round_s(
                        net,
                        workers=w,
                        measured_workers=last["workers"],
                        compute_s=last["median"]["compute_s"],
                        fixed_s=max(fixed.values()) if fixed else 0.0,
                        phase_inputs=payload,
                        phase_outputs=payload,
                    ),
                }
            )
        networks.append({"network": asdict(net), "label": net.label, "rounds": rows})
    return {"loopback": asdict(loopback), "loopback_check": check, "networks": networks}
