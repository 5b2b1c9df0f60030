"""`dane bench ddp`: PyTorch DDP against dask-dane's methods, side by side, in one run.

Every method trains the same model from the same initial weights on the same shards of one
store, on `workers` processes on this machine: PyTorch DDP (ddp.py); a single process with
the same cores and the same global batch (single.py: the "one machine" row); and the
dask-dane runs, by default DANE and synchronous SGD from the flags, or every [[run]] of a
`--runs` TOML file (the DDP run's store, model, workers, batch size, learning rate, momentum
and seed, plus the run's own settings). For each: test accuracy against training wall time
(evaluation excluded), communication rounds, bytes and images processed, and where it first
reaches each target; then the runs projected onto real networks (ddp_projection.py).
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ...pipeline.engine.run.rundir import RunDir
from ...pipeline.setup.config import RunConfig
from ..common.specs import option, require_at_least_one, run_tables
from ..network.model import Network
from .projection import project
from .run import DdpSpec, run_ddp
from .single import SingleSpec, run_single


@dataclass(frozen=True, kw_only=True)
class DaskRun:
    """One dask-dane run of the race: a name and its settings beyond the DDP run's."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)


def default_runs(
    *, dane_rounds: int, local_steps: int, grad_sample: int, sgd_rounds: int, sgd_eval_every: int
) -> tuple[DaskRun, ...]:
    """DANE (as the paper defines it, with a fixed gradient sample) and synchronous SGD."""
    require_at_least_one(dane_rounds=dane_rounds, sgd_rounds=sgd_rounds, local_steps=local_steps)
    return (
        DaskRun(
            name="dane",
            settings={
                "algorithm": "dane",
                "rounds": dane_rounds,
                "local_steps": local_steps,
                "grad_sample": grad_sample,
            },
        ),
        DaskRun(
            name="sgd",
            settings={"algorithm": "sgd", "rounds": sgd_rounds, "eval_every": sgd_eval_every},
        ),
    )


def read_runs(path: str | Path) -> tuple[DaskRun, ...]:
    """The [[run]] tables of a TOML file (each with a name), [defaults] applied to each."""
    return tuple(DaskRun(name=n, settings=s) for n, s in run_tables(path, "--runs"))


@dataclass(frozen=True, kw_only=True)
class CompareSpec:
    """See `dane bench ddp --help`."""

    ddp: DdpSpec
    runs: tuple[DaskRun, ...]
    targets: tuple[float, ...] = (0.88,)
    single: bool = option(True, help="Also train in one process (same cores, same global batch).")
    workdir: str = option("bench-out/ddp", help="Where stores and run directories go.")
    networks: tuple[Network, ...] = ()

    def validate(self) -> CompareSpec:
        self.ddp.validate()
        if not self.targets or not all(0 < t <= 1 for t in self.targets):
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.targets})")
        names = [run.name for run in self.runs]
        if len(set(names)) != len(names) or {"ddp", "single"} & set(names):
            raise ValueError(f"run names must be unique and not ddp or single (got {names})")
        for run in self.runs:
            self.dask_config(run)
        self.single_spec().validate()
        return self

    def dask_config(self, run: DaskRun) -> RunConfig:
        """A dask-dane run: the DDP run's own settings, then the run's."""
        settings = {"eval_every": 1, **run.settings}
        return replace(
            self.ddp.run_config(),
            out=str(Path(self.workdir) / run.name),
            device="cpu" if self.ddp.device == "cpu" else "auto",
            **settings,
        ).validate()

    def single_spec(self) -> SingleSpec:
        """One process with the cores of the DDP ranks and their global batch: the same
        synchronous SGD, without communication."""
        d = self.ddp
        return SingleSpec(
            store=d.store,
            model=d.model,
            epochs=d.epochs,
            batch_size=d.batch_size * d.workers,
            lr=d.lr,
            momentum=d.momentum,
            eval_every=d.eval_every,
            seed=d.seed,
            targets=self.targets,
            threads=d.workers,
            dtype=d.dtype,
        )


def run_compare(spec: CompareSpec, log: Any = print) -> dict[str, Any]:
    """DDP, the single process, then the dask-dane runs; returns the JSON-able comparison."""
    from ...pipeline.engine.run.errors import TrainingDiverged
    from ...pipeline.launchers.cluster import make_client
    from ...pipeline.training import train

    spec = spec.validate()
    shutil.rmtree(spec.workdir, ignore_errors=True)
    log("PyTorch DDP ...")
    ddp = run_ddp(spec.ddp)
    images_per_step = spec.ddp.batch_size * spec.ddp.workers
    methods: dict[str, Any] = {"ddp": ddp_method(ddp, images_per_step, spec.targets)}
    if spec.single:
        log("single process ...")
        methods["single"] = _single_method(run_single(spec.single_spec(), log=lambda _: None), spec)
    with make_client(spec.dask_config(spec.runs[0])) as client:
        # One untimed round first: the workers' first torch calls (imports, kernels, the
        # allocator) would otherwise count against whichever run comes first.
        warm_up = replace(spec.dask_config(spec.runs[0]), rounds=1, out=f"{spec.workdir}/warm-up")
        train(warm_up, client=client)
        for run in spec.runs:
            log(f"dask-dane {run.name} ...")
            config = spec.dask_config(run)
            try:
                train(config, client=client)
                diverged = None
            except TrainingDiverged as err:  # a result too: its rounds until then count
                diverged = str(err)
                log(f"dask-dane {run.name}: {diverged}")
            methods[run.name] = _dask_method(run.name, config, spec)
            methods[run.name]["model_bytes"] = ddp["model_bytes"]  # the same model
            methods[run.name]["diverged"] = diverged
    result = {
        "spec": {**asdict(spec), "networks": [asdict(n) for n in spec.networks]},
        "target": spec.targets[0],
        "targets": list(spec.targets),
        "workers": spec.ddp.workers,
        "methods": methods,
        "ddp_raw": {k: v for k, v in ddp.items() if k != "curve"},
    }
    result["projection"] = project(result, spec.networks)
    return result


def ddp_method(
    ddp: dict[str, Any], images_per_step: int, targets: tuple[float, ...]
) -> dict[str, Any]:
    """A DDP run (ddp.run_ddp's result) as a method of the race: curve, targets, compute."""
    curve = [
        {
            "comm_rounds": p["comm_rounds"],
            "train_wall_s": p["train_wall_s"],
            "cum_bytes": p["cum_bytes"],
            "images": p["step"] * images_per_step,
            "test_accuracy": p["test_accuracy"],
        }
        for p in ddp["curve"]
    ]
    return {
        "label": f"PyTorch DDP ({ddp['backend']})",
        "curve": curve,
        **targets_reached(curve, targets),
        # Mean compute per step (a time to target is a sum over steps): the training wall
        # time per step less the measured wait for the all-reduce.
        "round_compute_s": ddp["train_wall_s"] / ddp["steps"] - ddp["median_comm_s"],
        "round_fixed_s": 0.0,
        "bytes_per_round": ddp["bytes_per_step_total"],
        "model_bytes": ddp["model_bytes"],
        "phases": 1,
    }


def _single_method(single: dict[str, Any], spec: CompareSpec) -> dict[str, Any]:
    curve = [
        {
            "comm_rounds": 0,
            "train_wall_s": p["train_wall_s"],
            "cum_bytes": 0,
            "images": p["images"],
            "test_accuracy": p["test_accuracy"],
        }
        for p in single["curve"]
    ]
    return {
        "label": f"one process ({single['threads']} threads)",
        "curve": curve,
        **targets_reached(curve, spec.targets),
        "bytes_per_round": 0,
        "phases": 0,  # no communication: nothing to project
    }


def _dask_method(name: str, config: RunConfig, spec: CompareSpec) -> dict[str, Any]:
    rows = RunDir(Path(config.out)).rows()
    label = f"dask-dane {name}"
    if not rows:  # diverged in its first round
        return {"label": label, "config": config.as_dict(), "curve": [], "phases": 0,
                **targets_reached([], spec.targets), "bytes_per_round": 0}  # fmt: skip
    curve = dask_curve(rows)
    # Means, not medians: a time to target is a sum over rounds, warm-up round included.
    compute = statistics.fmean(r["max_worker_compute_s"] for r in rows)
    fixed = statistics.fmean(
        r["wall_s"] - (r.get("eval_s") or 0.0) - r["max_worker_compute_s"] for r in rows
    )
    phases = rows[0]["comm_rounds"]  # communication rounds of one iteration
    return {
        "label": label,
        "config": config.as_dict(),
        "curve": curve,
        **targets_reached(curve, spec.targets),
        "round_compute_s": compute,
        "round_fixed_s": fixed,  # orchestration and loopback transfers, measured
        "bytes_per_round": statistics.median(r["comm_bytes"] for r in rows),
        "phases": phases,
        "rounds_per_comm_round": 1 / phases,
    }


def dask_curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A dask-dane run's evaluations against training wall time (evaluation excluded)."""
    curve, wall = [], 0.0
    for row in rows:
        wall += row["wall_s"] - (row.get("eval_s") or 0.0)
        if row["test_accuracy"] is not None:
            curve.append(
                {
                    "comm_rounds": row["comm_rounds"],
                    "train_wall_s": wall,
                    "cum_bytes": row["cum_comm_bytes"],
                    "images": row["cum_images"],
                    "test_accuracy": row["test_accuracy"],
                }
            )
    return curve


def targets_reached(curve: list[dict[str, Any]], targets: tuple[float, ...]) -> dict[str, Any]:
    """Where the curve first reaches each target, and its final and best accuracy; the
    first target's figures also at the top level (the projection and the table use them)."""
    reached = {str(t): _first(curve, t) for t in targets}
    first = reached[str(targets[0])] or {}
    return {
        "to_target": reached,
        "time_to_target_s": first.get("train_wall_s"),
        "comm_rounds_to_target": first.get("comm_rounds"),
        "bytes_to_target": first.get("cum_bytes"),
        "images_to_target": first.get("images"),
        "final_test_accuracy": curve[-1]["test_accuracy"] if curve else None,
        "best_test_accuracy": max((p["test_accuracy"] for p in curve), default=None),
    }


def _first(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    return next((p for p in curve if (p["test_accuracy"] or 0.0) >= target), None)
