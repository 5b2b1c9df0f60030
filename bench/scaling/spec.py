"""What one `dane bench scaling` run is: the runs' settings and the worker counts."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import torch

from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run
from ..common.specs import option, run_defaults
from ..network.model import Network


@dataclass(frozen=True, kw_only=True)
class ScalingSpec:
    """One scaling benchmark; see `dane bench scaling --help`."""

    RUN_FLAGS: ClassVar = ("store", "model", "algorithm", "rounds", "local_steps",
                           "batch_size", "grad_sample", "device", "dtype", "seed",
                           "shard_memory", "broadcast", "collective")  # fmt: skip
    REQUIRED: ClassVar = ("store",)
    RUN_HELP: ClassVar = {
        "store": "Store to train on (written by `dane prepare`).",
        "rounds": "Rounds per count after a warm-up one; medians leave out the last.",
    }
    # The runs' settings; each count W runs rounds + 1 rounds (the warm-up) on W workers, on
    # every row (no validation split): the rows a round reads are what it times and counts.
    # The Dask graph's rounds by default, whose tasks the timelines, transfer logs and memory
    # by round read; --collective torch times the gloo group's (`dane bench collective` both).
    run: RunConfig = field(
        default_factory=run_defaults(model="lenet", rounds=5, local_steps=10, batch_size=64,
                                     device="cpu", val_fraction=0.0, collective="dask")
    )  # fmt: skip
    shards: int | None = option(None, help="Shards the store must hold (checked).")
    workers: tuple[int, ...] = option((1, 2, 4), help="Worker counts, comma-separated.")
    reference: bool = option(True, help="Also time reference.py.")
    fixed_cost: bool = option(True, help="Also time tiny rounds.")
    workdir: str = option("bench-out/scaling", help="Where stores and run directories go.")
    networks: tuple[Network, ...] = ()  # --network: projected onto (options.networks_or_standard)

    def validate(self) -> ScalingSpec:
        rounds, device, store = self.run.rounds, self.run.device, self.run.store
        if not self.workers or min(self.workers) < 1:
            raise ValueError(f"--workers must list counts of at least 1 (got {self.workers})")
        if rounds < 2:
            # rounds + 1 run: the warm-up round and the last (evaluated) one are left out.
            raise ValueError(
                f"--rounds must be at least 2, so that one round is measured (got {rounds})"
            )
        if device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda (got {device!r})")
        setup = prepare_run(self.config(1))  # store, model, settings: ValueError with a fix
        if self.shards is not None and self.shards != setup.store.num_shards:
            raise ValueError(
                f"--shards {self.shards}, but {store} holds {setup.store.num_shards} "
                f"shards; prepare it with `dane prepare ... --shards {self.shards}`"
            )
        if device == "cuda":
            _check_gpus(max(self.workers))
        return self

    def config(self, workers: int) -> RunConfig:
        """The run on `workers` workers: this spec's settings, rounds + 1 (the warm-up)."""
        run = self.run
        return replace(
            run,
            out=str(Path(self.workdir) / f"run-{workers}"),
            workers=workers,
            rounds=run.rounds + 1,
            grad_sample=run.grad_sample if run.algorithm == "dane" else 0,
            eval_every=10**6,  # only the last round evaluates (left out: it is the slowest)
        ).validate()


def _check_gpus(workers: int) -> None:
    if not torch.cuda.is_available():
        raise ValueError("--device cuda, but torch sees no GPU here; use --device cpu")
    if workers > torch.cuda.device_count():
        raise ValueError(
            f"--device cuda runs one worker per GPU; --workers asks for {workers} but "
            f"{torch.cuda.device_count()} GPU(s) are visible"
        )
