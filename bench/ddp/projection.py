"""`dane bench ddp`'s projections: each method's time to the first target on real networks.

Rounds (or DDP steps) to target as measured, times the round time network.py projects for a
network and a worker count; checked against the measured loopback run first. A dask-dane
method's payload per phase is the model scaled so that the projected bytes of a round equal
its measured comm_bytes (SCAFFOLD and S-DANE move more than the model per phase).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..network.model import (
    PROJECTED_WORKERS,
    Network,
    measure_loopback,
    project_dask_round_s,
    project_ddp_step_s,
)


def project(result: dict[str, Any], networks: tuple[Network, ...]) -> dict[str, Any]:
    """Time to target on loopback (checked against the measurement) and on `networks`."""
    loopback = measure_loopback()
    measured_w = result["workers"]
    methods = {
        name: method
        for name, method in result["methods"].items()
        if method["comm_rounds_to_target"] is not None and method["phases"]
    }
    check = {}
    for name, method in methods.items():
        projected = _time_to_target(method, name, loopback, measured_w, measured_w)
        check[name] = {
            "measured_s": method["time_to_target_s"],
            "projected_s": projected,
            "error_pct": 100 * (projected / method["time_to_target_s"] - 1),
        }
    projected_networks = []
    for net in networks:
        rows = [
            {
                "workers": w,
                **{
                    name: _time_to_target(method, name, net, w, measured_w)
                    for name, method in methods.items()
                },
            }
            for w in PROJECTED_WORKERS
        ]
        projected_networks.append(
            {"network": asdict(net), "label": net.label, "time_to_target_s": rows}
        )
    return {"loopback": asdict(loopback), "loopback_check": check, "networks": projected_networks}


def _time_to_target(
    method: dict[str, Any], name: str, net: Network, workers: int, measured_workers: int
) -> float:
    """Rounds to target (as measured) times the projected round (network.py)."""
    model = method["model_bytes"]
    if name == "ddp":
        step = project_ddp_step_s(
            net,
            workers=workers,
            measured_workers=measured_workers,
            compute_s=method["round_compute_s"],
            grad_bytes=model,
        )
        return method["comm_rounds_to_target"] * step
    phases = method["phases"]
    payload = method["bytes_per_round"] / model_copies(phases, measured_workers)
    per_round = project_dask_round_s(
        net,
        workers=workers,
        measured_workers=measured_workers,
        compute_s=method["round_compute_s"],
        fixed_s=method["round_fixed_s"],
        phase_inputs=[payload] * phases,
        phase_outputs=[payload] * phases,
    )
    return method["comm_rounds_to_target"] / phases * per_round


def model_copies(phases: int, workers: int) -> int:
    """Model-sized copies a round of `phases` phases moves on `workers` workers (comm.py):
    the weights to every worker and W - 1 partial sums back; then per later phase the
    broadcast to W - 1 workers and W - 1 partial sums."""
    return workers + (workers - 1) + (phases - 1) * 2 * (workers - 1)
