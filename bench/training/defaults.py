"""`dane bench defaults`: which settings does a newcomer's first run survive, on networks we
did not tune them for?

Every candidate (a set of algorithm settings, each written out in full so that a later change
of the defaults does not change what a candidate means) trains every network of NETS on the
stores of `--sources` for `--rounds` rounds, from `--seeds` seeds, with every other setting
at its default: a user's first run. After each round the bench measures the training loss
itself, at the weights the round ends with (the full shards, in training mode): the rows'
`train_loss` is each algorithm's own figure (DANE's at the round's start, FedAvg's on its
first minibatch), which does not compare across algorithms. A run survives when every one of
those losses stays below the loss at the initial weights (the loss `dane train` shows as round
1's). The runs are the single-process reference (run_reference): the Dask run equals it bit
for bit (tests/engine/test_dask_vs_reference.py), and it needs no cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...datasets.partition import PartitionSpec
from ...datasets.sources import SourceOptions, load_source
from ...datasets.store import write_store
from ...pipeline.engine.reference import run_reference
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import initial_state, prepare_run
from ..common.specs import option, run_defaults, spec_record
from ..common.training_set import shard_objectives

USER = "dask_dane.bench.training.default_nets:"  # networks as a user writes them
# Built-in networks (no BatchNorm) and a user's (default_nets.py): with and without BatchNorm,
# pooled, and wide (docs/python.md's network: a dense layer on every pixel's features, which
# the local steps' defaults throw to chance on 28x28 images). Fashion-MNIST leaves out LeNet,
# compact-cnn and resnet8: their full-shard passes cost minutes a run here.
_BOTH = ("mlp", "conv", "conv_bn", "mlp_bn", "wide_conv", "wide_conv_bn")
NETS: dict[str, tuple[str, ...]] = {
    "digits": ("small-cnn", "resnet8", *_BOTH, "conv_bn_dropout"),
    "fashion-mnist": _BOTH,
}
BUILT_IN = ("small-cnn", "resnet8", "mlp", "lenet", "compact-cnn")
PAPER_DANE = {
    "algorithm": "dane",
    "eta": 1.0,
    "mu": 0.0,
    "correction": "plain",
    "safeguard": "off",
    "local_clip": 0.0,
}
CANDIDATES: dict[str, dict[str, Any]] = {
    "default": {},  # whatever `dane train` does with no algorithm options
    "dane-paper": PAPER_DANE,
    "dane-mu0.1": {**PAPER_DANE, "mu": 0.1},
    "dane-mu1": {**PAPER_DANE, "mu": 1.0},
    "dane-shrink": {**PAPER_DANE, "correction": "shrink"},
    "dane-shrink-mu0.1": {**PAPER_DANE, "correction": "shrink", "mu": 0.1},
    "dane-backtrack": {**PAPER_DANE, "safeguard": "backtrack"},
    "dane-clip1": {**PAPER_DANE, "local_clip": 1.0},
    "fedavg": {"algorithm": "fedavg", "mu": 0.0, "local_clip": 0.0},
}


LEARNED = 0.8  # the last round's loss below this share of the initial one: it learned


@dataclass(frozen=True, kw_only=True)
class DefaultsSpec:
    """See `dane bench defaults --help`."""

    RUN_FLAGS: ClassVar = ("rounds",)
    run: RunConfig = field(default_factory=run_defaults(rounds=5, eval_every=1))
    candidates: tuple[str, ...] = option(
        tuple(CANDIDATES), help="Settings to try, comma-separated."
    )
    sources: tuple[str, ...] = option(tuple(NETS), help="Data: digits, fashion-mnist.")
    models: tuple[str, ...] = option((), help="Only these networks of NETS; empty: all.")
    seeds: tuple[int, ...] = option((0, 1), help="Seeds of each run, comma-separated.")
    shards: int = option(2, help="Shards of each store (a user's `dane prepare` default).")
    # Fashion-MNIST's 60,000 training rows would make the grid take hours on a laptop; a fixed
    # random subset keeps the question (does round 2 blow up?) and costs minutes.
    train_rows: int = option(6000, help="fashion-mnist: training rows kept (a seeded subset).")
    workdir: str = option("bench-out/defaults", help="Where the stores go.")

    def validate(self) -> DefaultsSpec:
        unknown = sorted(set(self.candidates) - set(CANDIDATES))
        if unknown:
            raise ValueError(f"--candidates: unknown {unknown}; choose from {sorted(CANDIDATES)}")
        if set(self.sources) - set(NETS) or not self.sources:
            raise ValueError(f"--sources must list some of {sorted(NETS)} (got {self.sources})")
        known = {model for nets in NETS.values() for model in nets}
        if set(self.models) - known:
            raise ValueError(f"--models must list some of {sorted(known)} (got {self.models})")
        if self.shards < 1 or self.train_rows < 10 * self.shards or not self.seeds:
            raise ValueError("--shards must be 1 or more, --train-rows 10 a shard, --seeds given")
        if self.run.rounds < 2:
            raise ValueError(f"--rounds must be 2 or more to see a spike (got {self.run.rounds})")
        return self

    def configs(self, store: str, model: str, candidate: str, seed: int) -> RunConfig:
        settings = CANDIDATES[candidate]
        model = model if model in BUILT_IN else f"{USER}{model}"
        return replace(self.run, store=store, model=model, seed=seed, **settings).validate()


def make_store(spec: DefaultsSpec, source: str) -> str:
    """The store of `source` under the workdir (written once; reused by later runs)."""
    path = Path(spec.workdir) / "stores" / f"{source}-{spec.train_rows}-{spec.shards}.zarr"
    if not path.exists():
        raw = load_source(source, SourceOptions())
        if source == "fashion-mnist":
            raw = subset(raw, spec.train_rows)
        write_store(raw, PartitionSpec(num_shards=spec.shards), path, force=False)
    return str(path)


def subset(raw: Any, train_rows: int) -> Any:
    """`train_rows` training rows and a third as many test rows, chosen by seed 0."""
    rng = np.random.default_rng(0)
    train = rng.permutation(len(raw.y_train))[:train_rows]
    test = rng.permutation(len(raw.y_test))[: max(1, train_rows // 3)]
    return replace(
        raw,
        x_train=raw.x_train[train],
        y_train=raw.y_train[train],
        x_test=raw.x_test[test],
        y_test=raw.y_test[test],
    )


def one_run(config: RunConfig) -> dict[str, Any]:
    """Train `config` by the reference; the training loss at init and after every round."""
    setup = prepare_run(config)
    weights, buffers = initial_state(setup.spec, config.seed)
    objectives = shard_objectives(setup)
    for objective in objectives:
        # Training mode normalises by the batch's statistics; the running ones are only
        # updated (on a copy: a loss with no step leaves them), but the forward needs them.
        objective.buffers = {name: value.clone() for name, value in buffers.items()}
    rows = [o.num_samples for o in objectives]

    def train_loss(weights: Any) -> float:
        losses = [o.loss(weights) for o in objectives]
        return sum(n * loss for n, loss in zip(rows, losses, strict=True)) / sum(rows)

    losses = [train_loss(weights)]
    started = time.perf_counter()
    ran = run_reference(
        setup,
        rounds=config.rounds,
        num_workers=config.workers,
        on_round=lambda state: losses.append(train_loss(state.weights)),
    )
    wall_s = time.perf_counter() - started
    return {
        "train_loss": losses,  # [0]: at the initial weights; [r]: after round r
        "test_accuracy": [row["test_accuracy"] for row in ran.history],
        "test_loss": [row["test_loss"] for row in ran.history],
        **judge(losses),
        "wall_s": wall_s,
    }


def judge(losses: list[float]) -> dict[str, Any]:
    """A run's verdict from its training losses ([0] at the initial weights).

    `no_spike`: every round's loss below the initial one (the issue's criterion). A network
    thrown to chance by its first steps and stuck there (ln 10 = 2.30 on 10 classes, just
    below a typical initial loss) passes that, so `learned` asks that the last round's loss be
    below LEARNED x the initial; a run survives with both.
    """
    rounds = losses[1:]
    finite = all(np.isfinite(loss) for loss in rounds)
    no_spike = finite and max(rounds) < losses[0]
    learned = finite and rounds[-1] < LEARNED * losses[0]
    return {
        "no_spike": bool(no_spike),
        "learned": bool(learned),
        "survived": bool(no_spike and learned),
        # The worst round's loss against the initial one: above 1 is a spike.
        "worst_ratio": max(rounds) / losses[0] if finite else float("inf"),
    }


def run_study(spec: DefaultsSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every candidate on every network, store and seed; a verdict per candidate."""
    runs = []
    for source in spec.sources:
        store = make_store(spec, source)
        for model in [m for m in NETS[source] if not spec.models or m in spec.models]:
            for candidate in spec.candidates:
                for seed in spec.seeds:
                    run = one_run(spec.configs(store, model, candidate, seed))
                    runs.append(
                        {
                            "source": source,
                            "model": model,
                            "candidate": candidate,
                            "seed": seed,
                            **run,
                        }
                    )
                    log(_line(runs[-1]))
    return {"spec": spec_record(spec), "runs": runs, "verdict": verdict(runs, spec.candidates)}


def verdict(runs: list[dict[str, Any]], candidates: tuple[str, ...]) -> dict[str, Any]:
    """Per candidate: runs survived, the worst spike, and the final test accuracy's mean."""
    summary = {}
    for candidate in candidates:
        own = [r for r in runs if r["candidate"] == candidate]
        finals = [r["test_accuracy"][-1] for r in own]
        summary[candidate] = {
            "runs": len(own),
            "survived": sum(r["survived"] for r in own),
            "spiked": sum(not r["no_spike"] for r in own),
            "stuck": sum(r["no_spike"] and not r["learned"] for r in own),
            "worst_ratio": max(r["worst_ratio"] for r in own),
            "mean_final_accuracy": float(np.mean(finals)),
            "min_final_accuracy": float(np.min(finals)),
            "wall_s": sum(r["wall_s"] for r in own),
        }
    return summary


def _line(run: dict[str, Any]) -> str:
    losses = " ".join(f"{loss:.3g}" for loss in run["train_loss"])
    mark = "ok   " if run["survived"] else "SPIKE"
    return (
        f"{mark} {run['candidate']:<18} {run['source']:<13} {run['model']:<11} "
        f"seed {run['seed']}: loss {losses}; acc {run['test_accuracy'][-1]:.3f}"
    )
