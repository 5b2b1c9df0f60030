"""`dane bench network`'s settings: which methods, on which links, with what budget.

`--rounds N` bounds every method: the DANE-family runs train N iterations; FedAvg, synchronous
SGD and DDP read the same number of training images as N DANE iterations (the gradient rows
included), so no method is given more data than DANE. With `--target`, every method stops at
its first evaluation at or above it (the time to target is what is measured, and a run on a
slow link need not go on past it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...pipeline import RunConfig, prepare_run, read_toml
from ..common.specs import run_config
from ..ddp.spec import DdpSpec
from .netns import rate_bytes_per_s

METHODS = ("dane", "ddp", "sgd", "fedavg")
_NOT_FROM_FILE = {"out", "store", "scheduler", "rounds", "workers"}  # the bench sets these
CALIBRATION_GRAD_ROWS = 256  # DANE's gradient rows per shard in a calibration run
EVALS_PER_EPOCH = 10  # of the step-by-step methods (DDP, SGD): the time to target's grain


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """See `dane bench network --help`."""

    store: str
    model: str = "compact-cnn"
    workers: int = 2
    bandwidths: tuple[str, ...] = ("1gbit", "100mbit", "10mbit")
    methods: tuple[str, ...] = METHODS
    rounds: int = 10
    target: float | None = None
    config: str | None = None  # a TOML of one more DANE-family run (its file name names it)
    local_steps: int = 50
    grad_sample: int = 0  # DANE as the paper defines it: the whole shard's gradient
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    timeout: float = 120.0
    broadcasts: tuple[str, ...] = ("auto",)  # each dask-dane method once per mode (--broadcast)
    latency_ms: float = 0.05  # the projection's latency: veth adds no delay, tbf only queues
    workdir: str = "bench-out/network"

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
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1 (got {self.rounds})")
        if self.target is not None and not 0 < self.target <= 1:
            raise ValueError(f"--target is a test accuracy in (0, 1] (got {self.target})")
        if not self.broadcasts or set(self.broadcasts) - {"auto", "direct", "tree", "allgather"}:
            raise ValueError(
                f"--broadcast takes a comma-separated list of auto, direct, tree, allgather "
                f"(got {','.join(self.broadcasts) or 'none'})"
            )
        if self.timeout <= 0:
            raise ValueError(f"--timeout must be positive (got {self.timeout})")
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
        sample = self.grad_sample if changes.get("algorithm", "dane") == "dane" else 0
        return run_config(self, local_lr=self.lr, stop_at_accuracy=self.target or 0.0,
                          grad_sample=sample, **changes)  # fmt: skip

    def images_budget(self) -> int:
        """Training images N iterations of DANE read on all shards (gradient rows included)."""
        setup = prepare_run(self._base(algorithm="dane"))
        shard_rows = [stop - start for start, stop in setup.store.shards]
        grad_rows = sum(min(self.grad_sample, n) if self.grad_sample else n for n in shard_rows)
        local_rows = len(shard_rows) * self.local_steps * self.batch_size
        return self.rounds * (grad_rows + local_rows)

    def dask_config(self, name: str, *, rounds: int | None = None) -> RunConfig:
        """The `dane train` run of method `name` (out: workdir/name)."""
        out = str(Path(self.workdir) / "runs" / name)
        shards = prepare_run(self._base()).store.num_shards
        if name == self.config_name:
            settings = {k: v for k, v in read_toml(self.config).items() if k not in _NOT_FROM_FILE}
            config = replace(self._base(), **settings, out=out, rounds=self.rounds)
        elif name == "dane":
            config = self._base(algorithm="dane", rounds=self.rounds, out=out)
        elif name == "fedavg":
            per_round = shards * self.local_steps * self.batch_size
            config = self._base(algorithm="fedavg", out=out,
                                rounds=math.ceil(self.images_budget() / per_round))  # fmt: skip
        else:  # sgd: one minibatch per shard a round
            total = math.ceil(self.images_budget() / (shards * self.batch_size))
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
        return max(1, rows // (batches_per_step * self.batch_size * EVALS_PER_EPOCH))

    def ddp_spec(self) -> DdpSpec:
        """DDP on the same store, model, batch, rate and seed, over the same image budget."""
        rows = prepare_run(self._base(algorithm="sgd")).store.num_train
        return DdpSpec(
            store=self.store, model=self.model, workers=self.workers,
            epochs=self.images_budget() / rows, batch_size=self.batch_size, lr=self.lr,
            momentum=self.momentum, seed=self.seed, device="cpu",
            eval_every=self._steps_between_evals(self.workers),
            target=self.target or 1.0, stop_at_target=self.target is not None,
        )  # fmt: skip
