"""`dane bench network`'s settings: which methods, on which links, with what budget.

`--rounds N` bounds every method: the DANE-family runs train N iterations; FedAvg, synchronous
SGD and DDP read the same number of training images as N DANE iterations (the gradient rows
included), so no method is given more data than DANE. With `--target`, every method stops at
its first evaluation at or above it (the time to target is what is measured, and a run on a
slow link need not go on past it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ...pipeline.setup.config import RunConfig, read_toml
from ...pipeline.setup.run_setup import prepare_run
from ..common.specs import option, run_defaults
from ..ddp.spec import DdpSpec
from .netns import rate_bytes_per_s

METHODS = ("dane", "ddp", "sgd", "fedavg")
_NOT_FROM_FILE = {"out", "store", "scheduler", "rounds", "workers"}  # the bench sets these
CALIBRATION_GRAD_ROWS = 256  # DANE's gradient rows per shard in a calibration run
EVALS_PER_EPOCH = 10  # of the step-by-step methods (DDP, SGD): the time to target's grain


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """See `dane bench network --help`."""

    RUN_FLAGS: ClassVar = ("store", "model", "workers", "rounds", "local_steps", "grad_sample",
                           "batch_size", "local_lr", "seed", "timeout")  # fmt: skip
    RUN_HELP: ClassVar = {
        "store": "Store to train on (written by `dane prepare`); needed but for --cleanup.",
        "workers": "Worker namespaces (Dask workers, DDP ranks).",
        "rounds": "DANE iterations; the others read as many images.",
        "local_lr": "Learning rate of every method.",
        "timeout": "Seconds to wait for the cluster.",
    }
    # Every method's settings (the DANE-family runs are this run, changed per method). Its
    # grad_sample is DANE's alone: the other methods read whole shards. Every row trains (no
    # validation split): the image budget counts the store's rows, and --target stops each
    # method on the test accuracy, as DDP's ranks stop.
    run: RunConfig = field(
        default_factory=run_defaults(model="compact-cnn", rounds=10, local_steps=50,
                                     batch_size=64, timeout=120.0, val_fraction=0.0)
    )  # fmt: skip
    bandwidths: tuple[str, ...] = option(
        ("1gbit", "100mbit", "10mbit"), flag="--bandwidth",
        help="Link rates to measure, comma-separated tc rates.",
    )  # fmt: skip
    methods: tuple[str, ...] = option(METHODS, help=f"Comma-separated, of {', '.join(METHODS)}.")
    broadcasts: tuple[str, ...] = option(
        ("auto",), flag="--broadcast",
        help="dask-dane runs once per collective given: auto, allgather (a Dask graph per "
        "round, --broadcast) or torch (--collective torch).",
    )  # fmt: skip
    target: float | None = option(None, help="Test accuracy: report the time to it, stop there.")
    config: str | None = option(  # its file name names the run
        None, help="One more DANE-family run: a `dane train --config` TOML."
    )
    latency_ms: float = 0.05  # the projection's latency: veth adds no delay, tbf only queues
    workdir: str = option("bench-out/network", help="Run directories and logs.")

    def validate(self) -> NetworkSpec:
        """Return self, or raise ValueError naming the first bad setting and its fix."""
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(
                f"--methods takes a comma-separated list of {', '.join(METHODS)} "
                f"(got {','.join(self.methods) or 'none'})"
            )
        for rate in self.bandwidths:
            rate_bytes_per_s(rate)
        if self.run.store is None:
            raise ValueError("--store is required (a store written by `dane prepare`)")
        if self.run.rounds < 1:
            raise ValueError(f"--rounds must be at least 1 (got {self.run.rounds})")
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.target})")
        if not self.broadcasts or set(self.broadcasts) - {"auto", "allgather", "torch"}:
            raise ValueError(
                f"--broadcast takes a comma-separated list of auto, allgather, torch "
                f"(got {','.join(self.broadcasts) or 'none'})"
            )
        if self.run.timeout <= 0:
            raise ValueError(f"--timeout must be positive (got {self.run.timeout})")
        for name in self.dask_methods():
            self.dask_config(name)
        self.ddp_spec().validate()
        return self

    @property
    def config_name(self) -> str | None:
        return Path(self.config).stem if self.config else None

    def dask_methods(self) -> list[str]:
        names = [m for m in self.methods if m != "ddp"]
        return names + ([self.config_name] if self.config_name else [])

    def all_methods(self) -> list[str]:
        return [*self.methods, *([self.config_name] if self.config_name else [])]

    def _base(self, **changes: Any) -> RunConfig:
        # --grad-sample is DANE's: the other methods read whole shards.
        sample = self.run.grad_sample if changes.get("algorithm", "dane") == "dane" else 0
        target = self.target or 0.0
        return replace(self.run, stop_at_accuracy=target, grad_sample=sample, **changes).validate()

    def images_budget(self) -> int:
        """Training images N iterations of DANE read on all shards (gradient rows included)."""
        setup = prepare_run(self._base(algorithm="dane"))
        shard_rows = [stop - start for start, stop in setup.store.shards]
        run = self.run
        grad_rows = sum(min(run.grad_sample, n) if run.grad_sample else n for n in shard_rows)
        local_rows = len(shard_rows) * run.local_steps * run.batch_size
        return run.rounds * (grad_rows + local_rows)

    def dask_config(self, name: str, *, rounds: int | None = None) -> RunConfig:
        """The `dane train` run of method `name` (out: workdir/name)."""
        out = str(Path(self.workdir) / "runs" / name)
        shards, run = prepare_run(self._base()).store.num_shards, self.run
        if name == self.config_name:
            settings = {k: v for k, v in read_toml(self.config).items() if k not in _NOT_FROM_FILE}
            config = replace(self._base(), **settings, out=out, rounds=run.rounds)
        elif name == "dane":
            config = self._base(algorithm="dane", rounds=run.rounds, out=out)
        elif name == "fedavg":
            per_round = shards * run.local_steps * run.batch_size
            config = self._base(algorithm="fedavg", out=out,
                                rounds=math.ceil(self.images_budget() / per_round))  # fmt: skip
        else:  # sgd: one minibatch per shard a round
            total = math.ceil(self.images_budget() / (shards * run.batch_size))
            config = self._base(algorithm="sgd", rounds=total, out=out,
                                eval_every=self._steps_between_evals(shards))  # fmt: skip
        config = replace(config, stop_at_accuracy=self.target or 0.0)
        if rounds is not None:  # a calibration run: the same graph, as little compute as may be
            config = replace(config, rounds=rounds, out=f"{out}-calibration", stop_at_accuracy=0.0,
                             local_steps=min(config.local_steps, 2))  # fmt: skip
            if config.algorithm == "dane":
                config = replace(config, grad_sample=CALIBRATION_GRAD_ROWS)
        return config.validate()

    def _steps_between_evals(self, batches_per_step: int) -> int:
        rows = prepare_run(self._base()).store.num_train
        return max(1, rows // (batches_per_step * self.run.batch_size * EVALS_PER_EPOCH))

    def ddp_spec(self) -> DdpSpec:
        """DDP on the same store, model, batch, rate and seed, over the same image budget."""
        rows, run = prepare_run(self._base(algorithm="sgd")).store.num_train, self.run
        return DdpSpec(
            store=run.store, model=run.model, workers=run.workers,
            epochs=self.images_budget() / rows, batch_size=run.batch_size, lr=run.local_lr,
            momentum=run.momentum, seed=run.seed, device="cpu",
            eval_every=self._steps_between_evals(run.workers),
            target=self.target or 1.0, stop_at_target=self.target is not None,
        )  # fmt: skip
