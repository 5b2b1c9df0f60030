"""`dane bench local-steps`: does more local work a round pay, as DANE promises?

DANE trades communication for local work: the longer each worker solves its local problem,
the fewer rounds a run should need. Each candidate (DANE as `dane train` runs it, DANE with
the paper's `--mu 0`, FedAvg: the same local problem without the tilt) trains each store at
every K of its list, on iid shards and 2 workers, every other setting at its default. Per
run: the test accuracy every round, the rounds and the examples (the rows the rounds read,
gradient phases and local steps) to the store's target, the best and final accuracy, and the
worst fall: how far a round's accuracy lies below the best of the rounds before it. The
verdict per store and candidate checks three targets: no fall above MAX_FALL points,
the final at K = 300 at least the final at K = 30 minus FINAL_SLACK points, and the rounds to
the target non-increasing in K. The runs go one after another on one cluster.
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ...pipeline.engine.run.rundir import RunDir
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run
from ..common.specs import option, run_defaults, spec_record
from .defaults import subset

MAX_FALL = 2.0  # accuracy points a round may lie below the best before it
FINAL_SLACK = 0.5  # points the final at the largest K of 300 or less may lose to K = 30
ONE_PASS = 0  # in a steps list: K = one pass over a shard (--local-epochs 1)


@dataclass(frozen=True, kw_only=True)
class Source:
    """A store's model, batch and target; its K list is the spec's (digits_steps, ...)."""

    model: str
    batch_size: int
    target: float


SOURCES = {
    "digits": Source(model="small-cnn", batch_size=32, target=0.97),
    # The Fashion-MNIST recipes' network and batch (presets/replays/fashion-mnist-*.toml): one pass
    # over a shard of 27,000 training rows is 422 steps.
    "fashion-mnist": Source(model="compact-cnn", batch_size=64, target=0.88),
}
CANDIDATES: dict[str, dict[str, Any]] = {
    "dane": {"algorithm": "dane"},  # the defaults (mu, local_theta unset)
    "dane-mu0": {"algorithm": "dane", "mu": 0.0},  # the paper's, the old default
    "fedavg": {"algorithm": "fedavg"},
}


@dataclass(frozen=True, kw_only=True)
class LocalStepsSpec:
    """See `dane bench local-steps --help`."""

    RUN_FLAGS: ClassVar = ("rounds",)
    run: RunConfig = field(default_factory=run_defaults(rounds=10, eval_every=1, workers=2))
    sources: tuple[str, ...] = option(tuple(SOURCES), help="Data: digits, fashion-mnist.")
    candidates: tuple[str, ...] = option(
        tuple(CANDIDATES), help="Settings to run: dane, dane-mu0, fedavg."
    )
    digits_steps: tuple[int, ...] = option((30, 100, 300, 1000), help="K on digits.")
    fashion_steps: tuple[int, ...] = option(
        (30, 100, 300, ONE_PASS), help="K on Fashion-MNIST; 0: one pass over a shard."
    )
    seeds: tuple[int, ...] = option((0,), help="Seeds of each run (initial weights, minibatches).")
    shards: int = option(2, help="iid shards of each store, one per worker.")
    # 0: all 60,000. A subset keeps the question (more K, fewer rounds?) at a fraction of the
    # cost; the defaults bench's stores are made the same way.
    train_rows: int = option(0, help="fashion-mnist: training rows kept (a seeded subset); 0: all.")
    workdir: str = option("bench-out/local-steps", help="Where the stores and runs go.")

    def validate(self) -> LocalStepsSpec:
        if not self.sources or set(self.sources) - set(SOURCES):
            raise ValueError(f"--sources must list some of {sorted(SOURCES)} (got {self.sources})")
        unknown = sorted(set(self.candidates) - set(CANDIDATES))
        if unknown or not self.candidates:
            raise ValueError(f"--candidates: unknown {unknown}; choose from {sorted(CANDIDATES)}")
        if any(k < 0 for k in (*self.digits_steps, *self.fashion_steps)):
            raise ValueError("--digits-steps and --fashion-steps take K >= 1, or 0 for one pass")
        if self.run.rounds < 2 or self.shards < 1 or not self.seeds:
            raise ValueError("--rounds must be 2 or more, --shards 1 or more, --seeds given")
        return self

    def steps(self, source: str) -> tuple[int, ...]:
        return self.digits_steps if source == "digits" else self.fashion_steps

    def config(
        self, store: str, source: str, candidate: str, steps: int, seed: int = 0
    ) -> RunConfig:
        """One run's settings; its directory under the workdir (run_study replaces it)."""
        own = SOURCES[source]
        local = {"local_epochs": 1.0} if steps == ONE_PASS else {"local_steps": steps}
        name = f"{source}-{candidate}-K{steps or 'pass'}-seed{seed}"
        return replace(
            self.run,
            seed=seed,
            store=store,
            model=own.model,
            batch_size=own.batch_size,
            workers=self.shards,
            out=str(Path(self.workdir) / "runs" / name),
            **local,
            **CANDIDATES[candidate],
        ).validate()


def make_store(spec: LocalStepsSpec, source: str) -> str:
    """The iid store of `source` under the workdir, written once (digits: as `dane train`'s
    embedded default; fashion-mnist: all of it, or a seeded subset of --train-rows)."""
    from ...datasets.partition import PartitionSpec
    from ...datasets.sources import SourceOptions, load_source
    from ...datasets.store import write_store

    rows = spec.train_rows if source == "fashion-mnist" else 0
    path = Path(spec.workdir) / "stores" / f"{source}-{rows or 'all'}-{spec.shards}.zarr"
    if not path.exists():
        raw = load_source(source, SourceOptions(seed=0))
        if rows:
            raw = subset(raw, rows)
        write_store(
            raw, PartitionSpec(kind="iid", num_shards=spec.shards, seed=0), path, force=False
        )
    return str(path)


def measure(rows: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """A run's figures from its metrics rows: accuracy by round, to the target, falls."""
    accuracy = [row["test_accuracy"] for row in rows]
    reached = next((i for i, a in enumerate(accuracy) if a is not None and a >= target), None)
    images = [row.get("images") or 0 for row in rows]
    falls, best = [0.0], accuracy[0]
    for value in accuracy[1:]:
        falls.append(100.0 * max(0.0, best - value))
        best = max(best, value)
    steps = [row.get("local_steps") or row.get("scheduled_local_steps") for row in rows]
    return {
        "test_accuracy": accuracy,
        "rounds_to_target": None if reached is None else reached + 1,
        "examples_to_target": None if reached is None else sum(images[: reached + 1]),
        "best": max(accuracy),
        "final": accuracy[-1],
        "worst_fall": max(falls),
        "local_steps": steps,  # taken a round (a DANE stop), or K
        "comm_rounds": rows[-1].get("comm_rounds"),
    }


def run_study(
    spec: LocalStepsSpec,
    log: Callable[[str], None] = print,
    on_run: Callable[[dict[str, Any]], None] = lambda partial: None,
) -> dict[str, Any]:
    """Every candidate at every K and seed on every store; a verdict per store and candidate.
    `on_run` receives the result so far after each run (an interrupted study keeps them)."""
    from ...pipeline.launchers.cluster import make_client

    runs: list[dict[str, Any]] = []
    stores = {source: make_store(spec, source) for source in spec.sources}
    first = spec.config(stores[spec.sources[0]], spec.sources[0], spec.candidates[0], 30)
    with make_client(first) as client:
        for source in spec.sources:
            for candidate in spec.candidates:
                for steps in spec.steps(source):
                    for seed in spec.seeds:
                        config = spec.config(stores[source], source, candidate, steps, seed)
                        runs.append(one_run(config, client, source, candidate, steps))
                        log(_line(runs[-1]))
                        on_run({"spec": spec_record(spec), "runs": list(runs)})
    return {"spec": spec_record(spec), "runs": runs, "verdict": verdict(runs)}


def one_run(config: RunConfig, client: Any, source: str, candidate: str, steps: int) -> dict:
    """Train `config` on `client` (its directory replaced: the bench's own) and measure it."""
    from ...pipeline.training import train

    shutil.rmtree(config.out, ignore_errors=True)
    started = time.perf_counter()
    train(config, client=client)
    rows = RunDir(Path(config.out)).rows()
    return {
        "source": source,
        "candidate": candidate,
        "steps": steps,
        "seed": config.seed,
        "label": prepare_run(config).strategy.label(),  # mu and local_theta as resolved
        "wall_s": round(time.perf_counter() - started, 1),
        **measure(rows, SOURCES[source].target),
    }


def verdict(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per store and candidate: the targets, each True or False (None where not measured).

    Over seeds: the worst fall of any run, the finals' mean, and the rounds to the target's
    mean, a run that never reached it counted as its rounds + 1 (a lower bound)."""
    result: dict[str, dict[str, Any]] = {}
    for source, candidate in dict.fromkeys((r["source"], r["candidate"]) for r in runs):
        own = [r for r in runs if (r["source"], r["candidate"]) == (source, candidate)]
        ks = sorted({r["steps"] for r in own}, key=lambda k: k or 10**9)  # one pass: largest
        final, to_target = {}, {}
        for k in ks:
            at_k = [r for r in own if r["steps"] == k]
            final[k] = sum(r["final"] for r in at_k) / len(at_k)
            rounds = [r["rounds_to_target"] or len(r["test_accuracy"]) + 1 for r in at_k]
            to_target[k] = sum(rounds) / len(rounds)
        kept = None
        if 30 in final and 300 in final:
            kept = final[300] >= final[30] - FINAL_SLACK / 100
        result[f"{source} {candidate}"] = {
            "worst_fall": max(r["worst_fall"] for r in own),
            "runs_with_a_fall": sum(r["worst_fall"] > MAX_FALL for r in own),
            "runs": len(own),
            "no_collapse": all(r["worst_fall"] <= MAX_FALL for r in own),
            "final_kept_at_300": kept,
            "rounds_non_increasing": all(
                a >= b for a, b in itertools.pairwise(to_target[k] for k in ks)
            ),
            "mean_final": {str(k or "pass"): final[k] for k in ks},
            "mean_rounds_to_target": {str(k or "pass"): to_target[k] for k in ks},
        }
    return result


def _line(run: dict[str, Any]) -> str:
    accuracy = " ".join(f"{100 * a:.1f}" for a in run["test_accuracy"])
    return (
        f"{run['source']:<13} {run['candidate']:<9} K={run['steps'] or 'pass':<5} "
        f"seed {run['seed']}  "
        f"to target {run['rounds_to_target']}  fall {run['worst_fall']:.1f}  acc {accuracy}"
    )
