"""`dane bench shards`: is the accuracy kept as the data are split over more machines?

The same training data (one source, one seed) split into m = 1, 2, 4, ... iid shards, the
same run configuration and iteration budget on each (a TOML of `dane train` settings, the
store left out), one run per m on one cluster: final and best test accuracy, and the
iterations, communication rounds and images to a target accuracy, against m. With more
shards each holds fewer rows, so the local problems (and their Hessians) differ more: DANE's
premise weakens, which is what this measures.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from ...datasets.store import open_store
from ...pipeline.algorithms.parts.local_steps_schedule import steps_for_epochs
from ...pipeline.engine.run.rundir import RunDir
from ...pipeline.setup.config import RunConfig, read_toml
from ...pipeline.setup.run_setup import prepare_store
from ..common.output import percent
from ..common.specs import option, run_config, spec_record
from .ddp_rows import ddp_row


@dataclass(frozen=True, kw_only=True)
class ShardsSpec:
    """See `dane bench shards --help`."""

    RUN_FLAGS: ClassVar = ()  # the run's settings come from --config (read_config)
    run: RunConfig  # the configuration run on every m (its store is made per shard count)
    source: str = option("fashion-mnist", help="Data source (as `dane prepare`).")
    shards: tuple[int, ...] = option((1, 2, 4, 8, 16, 32), help="Shard counts m, comma-separated.")
    # If given, --local-steps is set per m so that a local solve passes over its shard this
    # many times: every iteration then does the same work, whatever m.
    local_epochs: float | None = option(
        None, help="Set --local-steps per m to this many passes over a shard."
    )
    target: float = option(0.91, help="Test accuracy to reach.")
    seed: int = option(0, help="Seed of the split into shards.")
    # Beside DANE at every m: DDP at m ranks (ddp_rows.py: one process, batch m*B, linear
    # lr scaling and warm-up) and FedAvg with the same local settings, at the same budget.
    ddp: bool = option(True, help="Also DDP at m ranks: one process, batch m*B, lr m*lr, warm-up.")
    fedavg: bool = option(False, help="Also FedAvg with the same local settings.")
    # The configuration's own rows; off to run the DDP (or FedAvg) rows alone, e.g. on a
    # machine busy with other work: their accuracy does not depend on the machine's load.
    dane: bool = option(True, help="The configuration's own rows (--no-dane: DDP / FedAvg alone).")
    ddp_threads: int = option(0, help="Torch threads of the DDP rows' process; 0: every core.")
    # ddp_rows.py: at m >= this, DDP's row is the best of a tuning grid, not Goyal et al.'s rule.
    ddp_grid_from: int = option(
        0, help="DDP rows at m >= this: the best of a small lr grid (ddp_rows.py); 0: off."
    )
    workdir: str = option("bench-out/shards", help="Where stores and run directories go.")

    def validate(self) -> ShardsSpec:
        if not self.shards or min(self.shards) < 1:
            raise ValueError(f"--shards must list counts of at least 1 (got {self.shards})")
        if not (self.dane or self.ddp or self.fedavg):
            raise ValueError("--no-dane with --no-ddp and no --fedavg leaves nothing to run")
        if self.ddp_threads < 0:
            raise ValueError(
                f"--ddp-threads must be 0 (every core) or more (got {self.ddp_threads})"
            )
        if self.ddp_grid_from < 0:
            raise ValueError(f"--ddp-grid-from must be 0 (off) or more (got {self.ddp_grid_from})")
        if not 0 < self.target <= 1:
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.target})")
        if self.local_epochs is not None and not self.local_epochs > 0:
            raise ValueError(f"--local-epochs must be above 0 (got {self.local_epochs})")
        self.run_config(1, "unused")
        return self

    def run_config(self, shards: int, store: str, rows: int = 0) -> RunConfig:
        """The configuration on m = `shards` shards of `rows` training rows in all."""
        out = str(Path(self.workdir) / "runs" / f"m{shards}")
        # --local-epochs here, else the configuration's own local_epochs (a preset's)
        epochs = self.run.local_epochs if self.local_epochs is None else self.local_epochs
        steps = self.run.local_steps
        if epochs is not None and rows:
            steps = steps_for_epochs(
                epochs, rows, shards, self.run.batch_size, val_fraction=self.run.val_fraction
            )
        return replace(
            self.run, store=store, out=out, local_steps=steps, local_epochs=epochs
        ).validate()


def read_config(path: str | Path) -> RunConfig:
    """--config: a TOML of `dane train` settings, which must leave the store out."""
    settings = read_toml(path)
    if "store" in settings:
        raise ValueError(f"{path} names a store; drop it: each shard count has its own")
    # Every row trains unless the file says otherwise: the DDP rows' epochs and DANE's budget
    # count the store's training rows, and the runs select no model.
    return run_config(**{"val_fraction": 0.0, **settings})


def run_shards(spec: ShardsSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every shard count on one cluster, one after another; returns the JSON-able result."""
    from contextlib import nullcontext

    from ...pipeline.launchers.cluster import make_client
    from ...pipeline.training import train

    spec = spec.validate()
    stores = Path(spec.workdir) / "stores"
    runs, ddp_runs, fedavg_runs = [], [], []
    needs_cluster = spec.dane or spec.fedavg  # DDP's rows run in this process
    cluster = make_client(spec.run_config(1, "unused")) if needs_cluster else nullcontext()
    with cluster as client:
        for m in spec.shards:
            store = stores / store_name(spec.source, m, spec.seed)
            prepare_store(spec.source, store, shards=m, seed=spec.seed)
            rows = open_store(store).num_train
            config = spec.run_config(m, str(store), rows=rows)
            log(f"m = {m} ...")
            if spec.dane:
                runs.append(_train_and_sum_up(train, client, config, m, spec.target))
            if spec.fedavg:
                fedavg = replace(config, algorithm="fedavg", out=f"{config.out}-fedavg")
                fedavg_runs.append(_train_and_sum_up(train, client, fedavg, m, spec.target))
            if spec.ddp:
                grid = bool(spec.ddp_grid_from) and m >= spec.ddp_grid_from
                row = ddp_row(config, m, rows, spec.target, log, spec.ddp_threads, grid=grid)
                ddp_runs.append(row)
    first = (runs or fedavg_runs or [{"config": config.as_dict()}])[0]
    result = {"spec": spec_record(spec), "config": first["config"], "runs": runs}
    return {**result, "ddp_runs": ddp_runs, "fedavg_runs": fedavg_runs}


def _train_and_sum_up(train, client, config: RunConfig, m: int, target: float) -> dict:  # type: ignore[no-untyped-def]
    shutil.rmtree(config.out, ignore_errors=True)  # each shard count starts afresh
    started = time.perf_counter()
    train(config, client=client)
    return _summary(m, config, target, time.perf_counter() - started)


def _summary(m: int, config: RunConfig, target: float, seconds: float) -> dict[str, Any]:
    rows = RunDir(Path(config.out)).rows()
    evaluated = [r for r in rows if r["test_accuracy"] is not None]
    if not evaluated:  # the last round always evaluates: a run that ended without one failed
        raise RuntimeError(
            f"the run at m = {m} ({config.out}) recorded {len(rows)} rounds and no evaluation"
        )
    hit = next((r for r in evaluated if r["test_accuracy"] >= target), None)
    return {
        "shards": m,
        "config": config.as_dict(),
        "final_test_accuracy": evaluated[-1]["test_accuracy"],
        "best_test_accuracy": max(r["test_accuracy"] for r in evaluated),
        "rounds_to_target": hit["round"] if hit else None,
        "comm_rounds_to_target": hit["comm_rounds"] if hit else None,
        "images_to_target": hit["cum_images"] if hit else None,
        "curve": [
            {"round": r["round"], "test_accuracy": r["test_accuracy"], "images": r["cum_images"]}
            for r in evaluated
        ],
        "seconds": seconds,
        "timing": _timing(rows),
    }


def _timing(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round, what bench/scaling/time_to_accuracy.py projects from: the slowest worker's
    compute (its shards one after another, one thread), the round's wall time less its test
    evaluation (training time, as DDP's rows count it) and the bytes the round moved."""
    return {
        "workers": max(r["num_workers"] for r in rows),  # workers that held shards
        "round_form": rows[0].get("round_form", "direct"),  # how the bytes moved
        "phases": rows[0]["comm_rounds"],  # communication rounds per iteration
        "round_compute_s": [r["max_worker_compute_s"] for r in rows],
        "round_train_s": [r["wall_s"] - (r["eval_s"] or 0.0) for r in rows],
        "comm_bytes": [r["comm_bytes"] for r in rows],
    }


def markdown_table(result: dict[str, Any]) -> str:
    target = result["spec"]["target"]
    lines = [
        f"| shards m | local steps K | final acc. | best acc. | iterations to {percent(target)} | "
        f"comm rounds to {percent(target)} | images to {percent(target)} | wall (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        reached = run["rounds_to_target"] is not None

        def cell(key: str, run: dict = run, reached: bool = reached) -> str:
            return str(run[key]) if reached else "not reached"

        lines.append(
            f"| {run['shards']} | {run['config']['local_steps']} | "
            f"{run['final_test_accuracy']:.4f} | "
            f"{run['best_test_accuracy']:.4f} | {cell('rounds_to_target')} | "
            f"{cell('comm_rounds_to_target')} | {cell('images_to_target')} | "
            f"{run['seconds']:.0f} |"
        )
    return "\n".join(lines + _beside_tables(result))


def _beside_tables(result: dict[str, Any]) -> list[str]:
    """The FedAvg and DDP rows at the same budgets, where the run made them."""
    lines = []
    if result.get("fedavg_runs"):
        head = "| shards m | final acc. | best acc. | rounds to target | wall (s) |"
        lines += ["", "FedAvg, the same local settings:", "", head, "|---:" * 5 + "|"]
        for run in result["fedavg_runs"]:
            lines.append(
                f"| {run['shards']} | {run['final_test_accuracy']:.4f} | "
                f"{run['best_test_accuracy']:.4f} | {run['rounds_to_target'] or 'not reached'}"
                f" | {run['seconds']:.0f} |"
            )
    if result.get("ddp_runs"):
        head = (
            "| ranks m | global batch | lr | epochs | final acc. | best acc. | "
            "steps to target | train time (s) |"
        )
        title = "DDP at m ranks (one process, batch m*B; lr m*lr and warm-up, or the grid's best):"
        lines += ["", title, "", head, "|---:" * 8 + "|"]
        for run in result["ddp_runs"]:
            lines.append(
                f"| {run['shards']} | {run['global_batch']} | {_ddp_lr(run)} | "
                f"{run['epochs']:.2f} | {run['final_test_accuracy']:.4f} | "
                f"{run['best_test_accuracy']:.4f} | {run['steps_to_target'] or 'not reached'} | "
                f"{run['train_wall_s']:.0f} |"
            )
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    """Final accuracy, and iterations to the target, against the number of shards."""
    from ...pipeline.report import pyplot, save_figure

    runs = result["runs"]
    fig, (accuracy, iterations) = pyplot().subplots(1, 2, figsize=(10, 3.8))
    shards = [r["shards"] for r in runs]
    accuracy.plot(shards, [r["final_test_accuracy"] for r in runs], marker="o", label="final")
    accuracy.plot(shards, [r["best_test_accuracy"] for r in runs], marker=".", label="best")
    for name, beside in (("FedAvg", result.get("fedavg_runs")), ("DDP", result.get("ddp_runs"))):
        if beside:
            finals = [r["final_test_accuracy"] for r in beside]
            accuracy.plot([r["shards"] for r in beside], finals, marker="s", label=f"{name} final")
    reached = [r for r in runs if r["rounds_to_target"] is not None]
    iterations.plot(
        [r["shards"] for r in reached], [r["rounds_to_target"] for r in reached], marker="o"
    )
    for panel in (accuracy, iterations):
        panel.set_xscale("log", base=2)
        panel.set_xlabel("shards m (same data, same iteration budget)")
        panel.grid(alpha=0.3)
    accuracy.set_ylabel("test accuracy")
    accuracy.legend(fontsize=7)
    iterations.set_ylabel(f"iterations to {percent(result['spec']['target'])}")
    fig.tight_layout()
    save_figure(fig, path)


def _ddp_lr(run: dict[str, Any]) -> str:
    """A DDP row's lr, with the grid setting that chose it (where a grid ran)."""
    setting = run.get("setting")
    if not setting:
        return f"{run['lr']:g}"
    return f"{run['lr']:g} ({setting['scaling']}, {setting['warmup']:g} ep warm-up)"


def store_name(source: str, shards: int, seed: int) -> str:
    """The sweep's store of `shards` shards: one per split seed, since a store written
    before is reused (seed 0 keeps the name it always had)."""
    return f"{source}-iid-{shards}" + (f"-seed{seed}" if seed else "") + ".zarr"
