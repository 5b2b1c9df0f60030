"""What the scaling benchmark looks at inside a round, built with the engine's own parts.

A round's graph is built here with the engine's own builder (round/graph.py build_round) on
placeholders for the shards and the carry, so nothing is computed, and a worker's first read
is the engine's own load of two rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...pipeline.engine.plan import RunSetup
from ...pipeline.engine.round.aggregate import shard_placement
from ...pipeline.engine.round.graph import ChainLink, build_round, keys_in
from ...pipeline.engine.round.shards import load_shard
from ...pipeline.engine.run.run_state import round_input_of


def round_graph(setup: RunSetup, workers: list[str]) -> tuple[Any, str]:
    """One round's graph (evaluation excluded) as the driver builds it for `workers`, and
    the key of its update on the first worker."""
    placement = shard_placement(setup.store.num_shards, workers)
    carry = [f"carry{k}" for k in range(len(set(placement)))]  # not keys of this graph
    shards = [f"shard{i}" for i in range(len(placement))]
    graph, keys = build_round(
        round_input_of(setup, 1, placement),
        shards=shards,
        placement=placement,
        link=ChainLink(carry=carry),
        token="count",
    )
    return graph, keys.updates[0]


def chained_dependencies(
    setup: RunSetup, workers: list[str], rounds: int = 3
) -> tuple[dict[str, set[str]], list[str]]:
    """The dependencies of `rounds` rounds chained as the driver chains them, across rounds,
    and each round's update on the first worker: its depth grows by the steps a round adds
    to the chain."""
    placement = shard_placement(setup.store.num_shards, workers)
    dependencies, keys, _ = chained_rounds(
        lambda t: round_input_of(setup, t, placement), placement, rounds
    )
    return dependencies, [k.updates[0] for k in keys]


def chained_rounds(
    static_of: Callable[[int], Any], placement: list[str], rounds: int = 3, token: str = "count"
) -> tuple[dict[str, set[str]], list[Any], dict[str, Any]]:
    """`rounds` rounds (round t's RoundInput: static_of(t)) chained as the driver chains
    them, each round's graph linked to the one before by its keys standing in for futures:
    every task's dependencies among the tasks, across rounds; each round's RoundKeys; and the
    tasks themselves."""
    shards = [f"shard{i}" for i in range(len(placement))]
    link = ChainLink(carry=[f"carry{k}" for k in range(len(set(placement)))])
    tasks: dict[str, Any] = {}
    keys_of_rounds = []
    for t in range(1, rounds + 1):
        graph, keys = build_round(
            static_of(t), shards=shards, placement=placement, link=link, token=token
        )
        for layer in graph.layers.values():
            tasks.update(layer.mapping)
        link = keys.link({key: key for key in keys.held()})
        keys_of_rounds.append(keys)
    dependencies = {key: set(keys_in(task)) & set(tasks) for key, task in tasks.items()}
    return dependencies, keys_of_rounds, tasks


def read_first_rows(load_args: dict[str, Any], rows: int = 2) -> None:
    """Read `rows` rows of a shard as a worker's first load does (zarr's I/O thread, codecs)."""
    load_shard(**{**load_args, "start": 0, "stop": rows})
