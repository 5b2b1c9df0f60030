"""What the benchmarks may look at inside a round, as named functions of the engine.

bench/ measures the engine from outside (tests/test_layout.py forbids it to import tasks,
shards, graph or objective); where a benchmark needs to see a round's graph or a worker's
first read, it asks through these, so the engine stays free to change its internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .round.aggregate import shard_placement
from .round.chain_graph import ChainLink, build_chained_round
from .round.comm import layout
from .round.graph import build_round, placeholder_plan
from .round.shards import load_shard
from .round.tasks import RoundInput
from .run.run_state import round_static, runs_chained
from .setup.run_setup import RunSetup, initial_weights


@dataclass(frozen=True)
class RoundShape:
    """What a benchmark needs of a round's keys: the one that ends it, and whether the
    driver scatters the weights before each round (the tree form) or once (chained rounds)."""

    result: str
    scatters_each_round: bool


def round_graph(setup: RunSetup, workers: list[str]) -> tuple[Any, RoundShape]:
    """One round's graph (evaluation excluded) as the driver builds it for `workers`:
    (graph, shape), with placeholders for the weights so that nothing is computed."""
    placement = shard_placement(setup.store.num_shards, workers)
    if runs_chained(setup, len(set(placement)), initial_weights(setup.spec, 0)):
        gathered = layout(placement, gathered=True, transport=setup.config.transport)
        static = round_static(setup, 1, gathered)
        carry = [f"carry{k}" for k in range(len(set(placement)))]  # not keys of this graph
        shards = [f"shard{i}" for i in range(len(placement))]
        graph, keys = build_chained_round(
            static, shards=shards, placement=placement, link=ChainLink(carry=carry), token="count"
        )
        return graph, RoundShape(result=keys.updates[0], scatters_each_round=False)
    round_input = RoundInput(
        strategy=setup.strategy, spec=setup.spec, seed=0, index=1, layout=layout(placement)
    )
    plan = placeholder_plan(round_input, placement, token="count", evaluate=False)
    graph, keys = build_round(plan)
    return graph, RoundShape(result=keys.result, scatters_each_round=True)


def read_first_rows(load_args: dict[str, Any], rows: int = 2) -> None:
    """Read `rows` rows of a shard as a worker's first load does (zarr's I/O thread, codecs)."""
    load_shard(**{**load_args, "start": 0, "stop": rows})
