"""`dane bench ddp`: PyTorch DDP against dask-dane's DANE and synchronous SGD, side by side.

The three train the same model from the same initial weights on the same shards of one store
(worker r holds the shards the Dask pipeline places on it), on `workers` processes on this
machine. For each: test accuracy against training wall time (evaluation excluded) and against
communication rounds, the time and rounds to a target accuracy, and the bytes communicated;
then the same runs projected onto real networks (network.py), with the projection checked
against the measured loopback run.
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..pipeline.config import RunConfig
from ..pipeline.metrics import read_metrics
from ..pipeline.rundir import RunDir
from .ddp import DdpSpec, run_ddp
from .network import (
    PROJECTED_WORKERS,
    Network,
    measure_loopback,
    project_dask_round_s,
    project_ddp_step_s,
)
from .specs import require_at_least_one


@dataclass(frozen=True, kw_only=True)
class CompareSpec:
    """See `dane bench ddp --help`."""

    ddp: DdpSpec
    dane_rounds: int = 20
    local_steps: int = 50
    grad_sample: int = 1000
    sgd_rounds: int = 200
    sgd_eval_every: int = 10
    workdir: str = "bench-out/ddp"
    networks: tuple[Network, ...] = ()

    def validate(self) -> CompareSpec:
        self.ddp.validate()
        require_at_least_one(
            dane_rounds=self.dane_rounds, sgd_rounds=self.sgd_rounds, local_steps=self.local_steps
        )
        self.dask_config("dane")
        return self

    def dask_config(self, algorithm: str) -> RunConfig:
        """The dask-dane run: the DDP run's own (store, model, seed, workers, batch size,
        learning rate), as DANE or as dask-dane's synchronous SGD."""
        dane = algorithm == "dane"
        return replace(
            self.ddp.run_config(),
            out=str(Path(self.workdir) / algorithm),
            algorithm=algorithm,
            rounds=self.dane_rounds if dane else self.sgd_rounds,
            local_steps=self.local_steps,
            grad_sample=self.grad_sample if dane else 0,
            device="cpu" if self.ddp.device == "cpu" else "auto",
            eval_every=1 if dane else self.sgd_eval_every,
        ).validate()


def run_compare(spec: CompareSpec, log: Any = print) -> dict[str, Any]:
    """DDP, then DANE and SGD through Dask; returns the JSON-able comparison."""
    from ..pipeline.cluster import make_client
    from ..pipeline.loop import train

    spec = spec.validate()
    shutil.rmtree(spec.workdir, ignore_errors=True)
    log("PyTorch DDP ...")
    ddp = run_ddp(spec.ddp)
    methods: dict[str, Any] = {"ddp": _ddp_method(ddp, spec.ddp.target)}
    with make_client(spec.dask_config("dane")) as client:
        for algorithm in ("dane", "sgd"):
            log(f"dask-dane {algorithm} ...")
            config = spec.dask_config(algorithm)
            train(config, client=client)
            methods[algorithm] = _dask_method(config, spec.ddp.target)
            methods[algorithm]["model_bytes"] = ddp["model_bytes"]  # the same model
    result = {
        "spec": {**asdict(spec), "networks": [asdict(n) for n in spec.networks]},
        "target": spec.ddp.target,
        "workers": spec.ddp.workers,
        "methods": methods,
        "ddp_raw": {k: v for k, v in ddp.items() if k != "curve"},
    }
    result["projection"] = project(result, spec.networks)
    return result


def _ddp_method(ddp: dict[str, Any], target: float) -> dict[str, Any]:
    curve = [
        {
            "comm_rounds": p["comm_rounds"],
            "train_wall_s": p["train_wall_s"],
            "cum_bytes": p["cum_bytes"],
            "test_accuracy": p["test_accuracy"],
        }
        for p in ddp["curve"]
    ]
    return {
        "label": f"PyTorch DDP ({ddp['backend']})",
        "curve": curve,
        **_to_target(curve, target),
        # Mean compute per step (a time to target is a sum over steps): the training wall
        # time per step less the measured wait for the all-reduce.
        "round_compute_s": ddp["train_wall_s"] / ddp["steps"] - ddp["median_comm_s"],
        "round_fixed_s": 0.0,
        "bytes_per_round": ddp["bytes_per_step_total"],
        "model_bytes": ddp["model_bytes"],
        "phases": 1,
    }


def _dask_method(config: RunConfig, target: float) -> dict[str, Any]:
    rows = read_metrics(RunDir(Path(config.out)).metrics)
    curve, wall = [], 0.0
    for row in rows:
        wall += row["wall_s"] - (row.get("eval_s") or 0.0)
        if row["test_accuracy"] is not None:
            curve.append(
                {
                    "comm_rounds": row["comm_rounds"],
                    "train_wall_s": wall,
                    "cum_bytes": row["cum_comm_bytes"],
                    "test_accuracy": row["test_accuracy"],
                }
            )
    # Means, not medians: a time to target is a sum over rounds, warm-up round included.
    compute = statistics.fmean(r["max_worker_compute_s"] for r in rows)
    fixed = statistics.fmean(
        r["wall_s"] - (r.get("eval_s") or 0.0) - r["max_worker_compute_s"] for r in rows
    )
    phases = 2 if config.algorithm == "dane" else 1
    return {
        "label": f"dask-dane {config.algorithm}",
        "curve": curve,
        **_to_target(curve, target),
        "round_compute_s": compute,
        "round_fixed_s": fixed,  # orchestration and loopback transfers, measured
        "bytes_per_round": statistics.median(r["comm_bytes"] for r in rows),
        "phases": phases,
        "rounds_per_comm_round": 1 / phases,
    }


def _to_target(curve: list[dict[str, Any]], target: float) -> dict[str, Any]:
    hit = next((p for p in curve if p["test_accuracy"] >= target), None)
    return {
        "time_to_target_s": hit["train_wall_s"] if hit else None,
        "comm_rounds_to_target": hit["comm_rounds"] if hit else None,
        "bytes_to_target": hit["cum_bytes"] if hit else None,
        "final_test_accuracy": curve[-1]["test_accuracy"] if curve else None,
        "best_test_accuracy": max((p["test_accuracy"] for p in curve), default=None),
    }


def project(result: dict[str, Any], networks: tuple[Network, ...]) -> dict[str, Any]:
    """Time to target on loopback (checked against the measurement) and on `networks`."""
    loopback = measure_loopback()
    measured_w = result["workers"]
    check = {}
    for name, method in result["methods"].items():
        if method["comm_rounds_to_target"] is None:
            continue
        check[name] = {
            "measured_s": method["time_to_target_s"],
            "projected_s": _time_to_target(method, name, loopback, measured_w, measured_w),
        }
        check[name]["error_pct"] = 100 * (
            check[name]["projected_s"] / check[name]["measured_s"] - 1
        )
    projected = []
    for net in networks:
        rows = []
        for w in PROJECTED_WORKERS:
            rows.append(
                {
                    "workers": w,
                    **{
                        name: _time_to_target(method, name, net, w, measured_w)
                        for name, method in result["methods"].items()
                        if method["comm_rounds_to_target"] is not None
                    },
                }
            )
        projected.append({"network": asdict(net), "label": net.label, "time_to_target_s": rows})
    return {"loopback": asdict(loopback), "loopback_check": check, "networks": projected}


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
    rounds = method["comm_rounds_to_target"] / phases
    per_round = project_dask_round_s(
        net,
        workers=workers,
        measured_workers=measured_workers,
        compute_s=method["round_compute_s"],
        fixed_s=method["round_fixed_s"],
        phase_inputs=[model] * phases,
        phase_outputs=[model] * phases,
    )
    return rounds * per_round
