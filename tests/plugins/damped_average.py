"""A toy algorithm that lives outside dask_dane, as a user's own would: one file.

It is registered by one line, the entry point `damped-average = damped_average:DampedAverage`
in the group `dask_dane.algorithms` (tests/algorithms/test_plugin_algorithm.py writes that line into
a package's metadata), and its one hyperparameter, declared below and nowhere else, becomes
`dane train --damping`, the TOML key `damping` and `dask_dane.train(damping=...)`.

Legend: w = weights at the start of the round, v_i = shard i's weights after K local steps.
One round: w <- w + d (mean_i v_i - w), d = damping: FedAvg moving part of the way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dask_dane.pipeline.algorithms.fedavg import SolveAndAverage
from dask_dane.pipeline.algorithms.parts.checks import positive
from dask_dane.pipeline.algorithms.parts.hyperparameters import declare
from dask_dane.pipeline.engine.protocol import RoundEnd, RoundUpdate


@dataclass(frozen=True, kw_only=True)
class DampedAverage(SolveAndAverage):
    damping: float = declare(
        0.5, positive, exclusive=True, help="damped-average: share of the step to the average."
    )

    name: ClassVar[str] = "damped-average"

    def update(self, end: RoundEnd) -> RoundUpdate:
        average = end.mean.tensors["weights"]
        return RoundUpdate(weights=end.weights + self.damping * (average - end.weights))
