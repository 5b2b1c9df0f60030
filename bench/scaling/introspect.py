"""What the scaling benchmark looks at inside a round, built from the engine's surface.

bench/ measures the engine from outside (tests/test_layout.py forbids it to import tasks,
shards, graph or objective): a round's graph is built here with the engine's own builder
(pipeline.build_round) on placeholders for the shards and the carry, so nothing is computed,
and a worker's first read is the engine's own load of two rows.
"""

from __future__ import annotations

from typing import Any

from ...pipeline import ChainLink, RunSetup, build_round, load_shard, round_static, shard_placement


def round_graph(setup: RunSetup, workers: list[str]) -> tuple[Any, str]:
    """One round's graph (evaluation excluded) as the driver builds it for `workers`, and
    the key of its update on the first worker."""
    placement = shard_placement(setup.store.num_shards, workers)
    carry = [f"carry{k}" for k in range(len(set(placement)))]  # not keys of this graph
    shards = [f"shard{i}" for i in range(len(placement))]
    graph, keys = build_round(
        round_static(setup, 1, placement),
        shards=shards,
        placement=placement,
        link=ChainLink(carry=carry),
        token="count",
    )
    return graph, keys.updates[0]


def read_first_rows(load_args: dict[str, Any], rows: int = 2) -> None:
    """Read `rows` rows of a shard as a worker's first load does (zarr's I/O thread, codecs)."""
    load_shard(**{**load_args, "start": 0, "stop": rows})
