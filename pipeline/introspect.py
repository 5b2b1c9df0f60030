"""What the benchmarks may look at inside a round, as named functions of the engine.

bench/ measures the engine from outside (tests/test_layout.py forbids it to import tasks,
shards, graph or objective); where a benchmark needs to see a round's graph or a worker's
first read, it asks through these, so the engine stays free to change its internals.
"""

from __future__ import annotations

from typing import Any

from .aggregate import shard_placement
from .comm import layout
from .graph import build_round, placeholder_plan
from .run_setup import RunSetup
from .shards import load_shard
from .tasks import RoundInput


def round_graph(setup: RunSetup, workers: list[str]) -> tuple[Any, Any]:
    """One round's graph (evaluation excluded) as the driver builds it for `workers`:
    (graph, keys), with placeholders for the weights so that nothing is computed."""
    placement = shard_placement(setup.store.num_shards, workers)
    round_input = RoundInput(
        strategy=setup.strategy, spec=setup.spec, seed=0, index=1, layout=layout(placement)
    )
    return build_round(placeholder_plan(round_input, placement, token="count", evaluate=False))


def read_first_rows(load_args: dict[str, Any], rows: int = 2) -> None:
    """Read `rows` rows of a shard as a worker's first load does (zarr's I/O thread, codecs)."""
    load_shard(**{**load_args, "start": 0, "stop": rows})
