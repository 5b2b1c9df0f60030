"""`dane bench headline`: does the time to accuracy halve as workers double, with DANE?

For every seed, `dane bench shards` runs DANE's recipe (with DDP at m ranks beside it) and
FedAvg's recipe on the same data split into m = 1, 2, 4, 8 iid shards; then each recipe's fixed
cost of a round is measured as `dane bench scaling` measures it (tiny rounds: 1 and 2 workers),
and one DDP rank's step as `dane bench single --threads 1` times it. measured.py sums up what
was measured, projection.py projects it onto m workers, k x compute and real links, and
targets.py sets both against the targets.

The stores are written once per seed (split seed = the runs' seed) into one folder that each
recipe's `dane bench shards` work folder links to as its stores/: with --data-fraction below 1
they hold a seeded subset of the training and test rows (the same subset for every seed).
"""

from __future__ import annotations

import os
import platform
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...datasets.lazy import take_rows
from ...datasets.partition import PartitionSpec
from ...datasets.sources import SourceOptions, load_source
from ...datasets.store import open_store, write_store
from ...pipeline.setup.run_setup import prepare_run, prepare_store
from ..ddp.single import run_single
from ..scaling.costs import fixed_cost
from ..scaling.run import run_workers
from ..scaling.spec import ScalingSpec
from ..scaling.time_methods import fixed_cost_from, rank_step_from
from ..training.ddp_rows import ddp_spec
from ..training.shards import run_shards, store_name
from .measured import over_seeds
from .projection import project
from .spec import METHODS, HeadlineSpec, reused_fixed_costs
from .targets import check_targets

SUBSET_SEED = 0  # the rows a --data-fraction keeps: the same for every seed
RANK_STEPS = 100  # steps timed for one DDP rank's step


def run_headline(
    spec: HeadlineSpec,
    log: Callable[[str], None] = print,
    on_partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every seed's sweeps, the fixed costs and a DDP rank's step; returns the JSON-able result."""
    spec = spec.validate()
    started, machine = time.perf_counter(), _machine()
    stores = {seed: write_stores(spec, seed) for seed in spec.seeds}
    first = stores[spec.seeds[0]]
    if spec.fixed_cost:
        fixed_runs = reused_fixed_costs(spec.fixed_cost)
    else:
        fixed_runs = {}
        for method in METHODS:
            log(f"the fixed cost of a round, {method}'s recipe ...")
            largest = first / _store(spec, max(spec.shards), spec.seeds[0])
            fixed_runs[method] = measure_fixed_cost(spec, method, largest)
    sweeps: list[dict[str, Any]] = []
    for seed in spec.seeds:
        sweep: dict[str, Any] = {"seed": seed}
        for method in METHODS:
            shards = spec.shards_spec(method, seed)
            log(f"seed {seed}: {method}'s recipe{' and DDP' if shards.ddp else ''} ...")
            link_stores(Path(shards.workdir), stores[seed])
            sweep[method] = run_shards(shards, log=log)
        sweeps.append(sweep)
        if on_partial:
            on_partial({"spec": spec.record(), "machine": machine, "sweeps": sweeps})
    rank = None
    if spec.ddp:
        log("one DDP rank's step (one thread) ...")
        rank = measure_rank_step(spec, first / _store(spec, min(spec.shards), spec.seeds[0]))
    machine["wall_s"] = time.perf_counter() - started
    machine["load_average_at_end"] = os.getloadavg()
    return summarise(spec, sweeps, fixed_runs, rank, machine)


def summarise(
    spec: HeadlineSpec,
    sweeps: list[dict[str, Any]],
    fixed_runs: dict[str, dict[str, Any]],
    rank: dict[str, Any] | None,
    machine: dict[str, Any],
) -> dict[str, Any]:
    """The result: what was measured, what was projected from it, and the targets."""
    fixed = {method: fixed_cost_from(fixed_runs[method]) for method in METHODS}
    config = sweeps[0]["dane"]["config"]
    rank_step = rank_step_from(rank, config["batch_size"], config["model"]) if rank else None
    measured = over_seeds(sweeps, spec.targets)
    tables = project(
        sweeps,
        fixed,
        rank_step,
        targets=spec.targets,
        networks=spec.networks,
        speedups=spec.speedups,
    )
    return {
        "spec": spec.record(),
        "machine": machine,
        "recipes": {m: sweeps[0][m]["config"] for m in METHODS},
        "measured": {
            "what": "on this machine: each recipe's runs on its W0 workers (m / W0 shards a "
            "worker), DDP's m ranks as one process of batch m*B on every core; times are "
            "training time (test evaluation off the clock)",
            "methods": measured,
            "fixed_cost": {m: asdict(f) for m, f in fixed.items()},
            "fixed_cost_runs": fixed_runs,
            "ddp_rank_step_s": rank_step,
        },
        "projected": {
            "what": "time to target on m workers, one shard each, at k x this machine's "
            "compute, over each link: the measured iterations (DDP: steps) to target x the "
            "round's time from the measured compute, fixed cost and payloads (DDP: a rank's "
            "step and one ring all-reduce of the gradient)",
            "tables": tables,
        },
        "targets": check_targets(measured, tables, spec),
        "sweeps": sweeps,
    }


def _store(spec: HeadlineSpec, m: int, seed: int) -> str:
    return store_name(spec.source, m, seed)


def write_stores(spec: HeadlineSpec, seed: int) -> Path:
    """The folder of one seed's stores (one per m), written where missing: the source's rows,
    or with --data-fraction below 1 the seeded subset of them."""
    folder = Path(spec.workdir) / (
        "stores" if spec.data_fraction == 1 else f"stores-{spec.data_fraction:g}"
    )
    missing = [m for m in spec.shards if not (folder / _store(spec, m, seed)).exists()]
    if spec.data_fraction == 1:
        for m in missing:  # as `dane bench shards` writes them
            prepare_store(spec.source, folder / _store(spec, m, seed), shards=m, seed=seed)
        return folder.resolve()
    raw = load_source(spec.source, SourceOptions(seed=seed)) if missing else None
    for m in missing:
        assert raw is not None
        subset = replace(
            raw,
            **_rows(raw.x_train, raw.y_train, spec.data_fraction, "train"),
            **_rows(raw.x_test, raw.y_test, spec.data_fraction, "test"),
        )
        partition = PartitionSpec(kind="iid", num_shards=m, seed=seed)
        write_store(subset, partition, folder / _store(spec, m, seed), force=False)
    return folder.resolve()


def _rows(x: Any, y: np.ndarray, fraction: float, split: str) -> dict[str, Any]:
    """A seeded `fraction` of a split's rows, in their order."""
    keep = np.random.default_rng(SUBSET_SEED).permutation(len(y))[
        : max(1, round(fraction * len(y)))
    ]
    keep.sort()
    return {f"x_{split}": take_rows(x, keep), f"y_{split}": y[keep]}


def link_stores(workdir: Path, stores: Path) -> None:
    """Point a `dane bench shards` work folder's stores/ at the seed's stores."""
    workdir.mkdir(parents=True, exist_ok=True)
    link = workdir / "stores"
    if link.is_symlink() or link.exists():
        if link.is_symlink() and link.resolve() == stores:
            return
        link.unlink()  # a link to another fraction's folder
    link.symlink_to(stores, target_is_directory=True)


def measure_fixed_cost(spec: HeadlineSpec, method: str, store: Path) -> dict[str, Any]:
    """A recipe's fixed cost of a round: `dane bench scaling`'s tiny rounds (logistic regression
    on tiny shards, as many as `store` holds) on 1 and 2 workers; returned as its JSON holds it."""
    config = spec.config(method, spec.seeds[0])
    run = replace(config, store=str(store), local_epochs=None, rounds=2)
    workdir = Path(spec.workdir) / "fixed-cost" / method
    shutil.rmtree(workdir, ignore_errors=True)  # afresh, as `dane bench scaling` starts
    workdir.mkdir(parents=True)
    scaling = ScalingSpec(run=run, workers=(1, 2), reference=False, workdir=str(workdir))
    rows = fixed_cost(scaling, workdir, run_workers)
    phases = len(prepare_run(scaling.config(1)).strategy.phases)
    return {"machine": {"cpu_count": os.cpu_count()}, "phases": phases, "fixed_cost": rows}


def measure_rank_step(spec: HeadlineSpec, store: Path) -> dict[str, Any]:
    """One DDP rank's step as `dane bench single --threads 1` times it, at DANE's recipe's batch
    and rate (evaluated once, at the end, off its clock)."""
    config = replace(spec.config("dane", spec.seeds[0]), store=str(store))
    rows = open_store(store).num_train
    epochs = min(1.0, RANK_STEPS * config.batch_size / rows)
    single = replace(ddp_spec(config, 1, epochs, rows, threads=1), eval_every=10**9)
    return run_single(single, log=lambda line: None)


def _machine() -> dict[str, Any]:
    import torch

    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpu_count": os.cpu_count(),
        "cpu": _cpu_name(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "load_average_at_start": os.getloadavg(),
    }


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
