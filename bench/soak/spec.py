"""What one `dane bench soak` run is: its run's settings and its warm-up."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from ...pipeline.setup.config import RunConfig
from ..common.specs import option, run_defaults


@dataclass(frozen=True, kw_only=True)
class SoakSpec:
    """One soak run; see `dane bench soak --help`."""

    RUN_FLAGS: ClassVar = (
        "rounds", "workers", "algorithm", "model", "local_steps", "seed", "collective",
    )  # fmt: skip
    # The soaked run (its store and run directory are the workdir's); `workers` shards.
    # The Dask graph's rounds by default: the census counts the keys the chained rounds
    # leave on the scheduler (rounds ahead, carries); `--collective torch` soaks the group's
    # segments, whose worker memory (the buffers kept per segment, the rounds kept for a
    # restart) must stay as flat.
    run: RunConfig = field(
        default_factory=run_defaults(rounds=300, model="mlp", local_steps=5, collective="dask")
    )
    warmup: int = option(30, help="Rounds before the baseline is taken.")
    workdir: str = option("bench-out/soak", help="Where the store and the run directory go.")

    def validate(self) -> SoakSpec:
        rounds = self.run.rounds
        if self.warmup < 1 or rounds < self.warmup + 10:
            raise ValueError(
                f"--rounds must exceed --warmup by at least 10 (got {rounds} and "
                f"{self.warmup}); e.g. --rounds 300 --warmup 30"
            )
        self.config(Path(self.workdir))
        return self

    def config(self, workdir: Path) -> RunConfig:
        """The soaked run: this spec's settings on a digits store of one shard per worker."""
        store = workdir / f"digits-{self.run.workers}shards.zarr"
        run = replace(self.run, store=str(store), out=str(workdir / "run"), eval_every=10)
        return run.validate()
