"""What one `dane bench headline` run is: two recipes, the shard counts, the seeds, the budget
in passes over the data, the targets, and the pilot's smaller defaults.

Each recipe is a TOML of `dane train` settings without a store (as `dane bench shards --config`
takes), written in passes (its local_epochs: K is a share of a pass over a shard, so the file
means the same on any m). The budget in passes then sets its rounds: passes / local_epochs, the
same on every m, as `dane bench shards` runs one configuration on every m.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...pipeline.setup.config import RunConfig
from ..network.model import STANDARD_NETWORKS, Network
from ..training.shards import ShardsSpec, read_config

METHODS = ("dane", "fedavg")  # the recipes, by the key the results use; DDP runs beside DANE
COMPUTE_SPEEDUPS = (1.0, 10.0, 100.0)
# The full grid and the pilot (a fifth of the rows, 3 passes, one seed: about 9 minutes on 2
# idle cores). The pilot's targets are lower: on a fifth of the rows one machine ends near 84 %
# and m = 8 far below (K = 1/8 pass over 1,500 rows is 3 steps), so 88 % would leave every
# speed-up unmeasured.
FULL = {"data_fraction": 1.0, "passes": 5.0, "seeds": (0, 1, 2), "targets": (0.88, 0.90)}
PILOT = {"data_fraction": 0.2, "passes": 3.0, "seeds": (0,), "targets": (0.6, 0.7)}


@dataclass(frozen=True, kw_only=True)
class HeadlineSpec:
    """One headline benchmark; see `dane bench headline --help`."""

    dane_config: str = "preset:dane-many-workers"
    fedavg_config: str = "preset:fashion-mnist-scale"
    source: str = "fashion-mnist"
    model: str = "compact-cnn"
    shards: tuple[int, ...] = (1, 2, 4, 8)
    seeds: tuple[int, ...] = FULL["seeds"]
    passes: float = FULL["passes"]
    data_fraction: float = FULL["data_fraction"]
    targets: tuple[float, ...] = FULL["targets"]
    ddp: bool = True
    pilot: bool = False
    fixed_cost: str | None = None  # an earlier headline JSON whose fixed costs are reused
    networks: tuple[Network, ...] = STANDARD_NETWORKS
    speedups: tuple[float, ...] = COMPUTE_SPEEDUPS
    workdir: str = "bench-out/headline"

    def validate(self) -> HeadlineSpec:
        """Every flag checked before any work: ValueError naming the flag and the fix."""
        shards, seeds = self.shards, self.seeds
        if not shards or min(shards) < 1 or len(set(shards)) != len(shards):
            raise ValueError(f"--shards must list distinct counts of at least 1 (got {shards})")
        if max(shards) < 2:
            raise ValueError(f"--shards must hold a count of 2 or more (got {shards})")
        if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
            raise ValueError(f"--seeds must list distinct seeds of 0 or more (got {seeds})")
        if not (math.isfinite(self.passes) and self.passes > 0):
            raise ValueError(f"--passes must be a positive number (got {self.passes})")
        if not 0 < self.data_fraction <= 1:
            raise ValueError(f"--data-fraction must lie in (0, 1] (got {self.data_fraction})")
        if not self.targets or not all(0 < t <= 1 for t in self.targets):
            raise ValueError(f"--targets are test accuracies in (0, 1] (got {self.targets})")
        if not self.speedups or not all(k > 0 for k in self.speedups):
            raise ValueError(f"--compute-speedup must list numbers above 0 (got {self.speedups})")
        for method in METHODS:
            self.shards_spec(method, seeds[0]).validate()
        if self.fixed_cost is not None:
            reused_fixed_costs(self.fixed_cost)
        return self

    def recipe(self, method: str) -> RunConfig:
        """--dane-config or --fedavg-config, read and checked: a budget in passes needs K in
        passes (local_epochs) and a constant K; payloads are sized on 2 workers or more."""
        flag = f"--{method}-config"
        path = self.dane_config if method == "dane" else self.fedavg_config
        try:
            config = read_config(path)
        except ValueError as error:
            raise ValueError(f"{flag}: {error}") from None
        if config.local_epochs is None or config.local_steps_schedule != "constant":
            raise ValueError(
                f"{flag} {path} must give K in passes with a constant schedule (local_epochs = E, "
                "no local_steps_schedule): --passes sets the rounds from it"
            )
        if config.workers < 2:
            raise ValueError(f"{flag} {path} runs on 1 worker; set workers = 2 or more in it")
        return config

    def rounds(self, config: RunConfig) -> int:
        """The rounds that make --passes passes of K = local_epochs passes each."""
        assert config.local_epochs is not None  # recipe() checked it
        return max(1, round(self.passes / config.local_epochs))

    def config(self, method: str, seed: int) -> RunConfig:
        """The recipe as every m runs it: this model, the budget's rounds, evaluated every round
        (the time to a target is read at each), initial weights and data order of `seed`."""
        recipe = self.recipe(method)
        return replace(
            recipe, model=self.model, rounds=self.rounds(recipe), eval_every=1, seed=seed
        ).validate()

    def shards_spec(self, method: str, seed: int) -> ShardsSpec:
        """`dane bench shards` of one recipe and seed (split seed = run seed); DDP at m ranks
        beside DANE's recipe only, at its epoch budget."""
        return ShardsSpec(
            run=self.config(method, seed),
            source=self.source,
            shards=self.shards,
            target=self.targets[0],
            seed=seed,
            ddp=self.ddp and method == "dane",
            fedavg=False,
            workdir=str(Path(self.workdir) / f"seed{seed}" / method),
        )

    def record(self) -> dict[str, Any]:
        """The spec as the results' JSON records it."""
        fields = {k: v for k, v in self.__dict__.items() if k != "networks"}
        return {**fields, "networks": [n.__dict__ for n in self.networks]}


def headline_spec(*, pilot: bool, **given: Any) -> HeadlineSpec:
    """The spec of the flags given (None: not given): the pilot's defaults or the full grid's,
    then what was given; --pilot keeps the first of --seeds."""
    defaults = PILOT if pilot else FULL
    chosen = {k: v for k, v in given.items() if v is not None}
    if pilot and "seeds" in chosen:
        chosen["seeds"] = chosen["seeds"][:1]
    return HeadlineSpec(pilot=pilot, **{**defaults, **chosen})


def reused_fixed_costs(path: str) -> dict[str, dict[str, Any]]:
    """--fixed-cost: the measured fixed costs of an earlier `dane bench headline` JSON."""
    try:
        result = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"--fixed-cost {path} does not exist; check the path") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(
            f"--fixed-cost {path} is not JSON ({error}); pass a headline JSON"
        ) from None
    costs = result.get("measured", {}).get("fixed_cost_runs") if isinstance(result, dict) else None
    if not isinstance(costs, dict) or set(costs) != set(METHODS):
        raise ValueError(
            f"--fixed-cost {path} holds no fixed costs of both recipes; pass a `dane bench "
            "headline` JSON, or drop --fixed-cost to measure them"
        )
    return costs
