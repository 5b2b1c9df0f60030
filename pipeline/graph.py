"""One round as one Dask task graph. Builds the graph; computes nothing.

Per phase p of the strategy, for every shard i: `{phase}-{round}-{i}` runs on the worker that
holds shard i; a pairwise tree of `reduce_{phase}` tasks sums the outputs on the workers;
`broadcast_{phase}` makes what the next phase receives from the sum. `update-{round}` finishes
every phase (averages, byte counts) and ends the round with the new weights, and
`evaluate-{round}` scores them on the test split. Keys carry a
run token after the numbers so that two runs on one scheduler never share a key; Dask's
dashboard groups tasks by the leading name, so the task stream reads `local_grad`,
`local_solve`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ..models.registry import ModelSpec
from . import tasks
from .aggregate import cross_worker_merges, reduction_groups
from .algorithms.base import Strategy


@dataclass(frozen=True, kw_only=True)
class RoundPlan:
    """What a round's graph is built from: data references (futures) and settings."""

    strategy: Strategy
    spec: ModelSpec
    seed: int
    round_index: int
    token: str
    weights: Any  # Future of the weights tensor
    state: Any  # Future of the strategy state
    shards: list[Any]  # Futures of ShardData, in shard order
    placement: list[str]  # worker address that holds each shard
    test_shard: Any | None = None  # Future of the test ShardData, or None to skip evaluation
    test_worker: str | None = None  # where the test split was loaded: evaluate runs there
    # Futures of each shard's own state (algorithms/base.py), or None if the strategy has none.
    shard_states: list[Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RoundKeys:
    result: str
    weights: str
    state: str
    evaluation: str | None


@dataclass
class _GraphBuilder:
    """Collects one layer per task so each can carry its own worker annotation."""

    token: str
    layers: dict[str, MaterializedLayer] = field(default_factory=dict)
    deps: dict[str, set[str]] = field(default_factory=dict)

    def key(self, *parts: object) -> str:
        return "-".join(map(str, parts)) + f"-{self.token}"

    def add(self, key: str, task: tuple, *, depends: list[str], worker: str | None = None) -> str:
        # allow_other_workers: if the worker dies, Dask reruns the task (and reloads the
        # shard from zarr) elsewhere instead of waiting for a worker that will not return.
        annotations = {"workers": [worker], "allow_other_workers": True} if worker else None
        self.layers[key] = MaterializedLayer({key: task}, annotations=annotations)
        self.deps[key] = set(depends)
        return key

    def graph(self) -> HighLevelGraph:
        return HighLevelGraph(self.layers, self.deps)


def build_round(plan: RoundPlan) -> tuple[HighLevelGraph, RoundKeys]:
    """The graph of one round and the keys of its outputs."""
    b = _GraphBuilder(token=plan.token)
    t = plan.round_index
    num_receivers = len(set(plan.placement))
    # Everything central (finishing phases, the update) runs where the reduction tree ends:
    # the worker of shard 0. Pinning it, and each merge where its first input is, makes the
    # transfers exactly those tasks.finish_phase counts; the driver scatters the weights there.
    root = plan.placement[0]
    partials_moved = cross_worker_merges(plan.placement)
    received_key: str | None = None
    previous_locals: list[str | None] = [None] * len(plan.shards)
    totals: list[str] = []
    for phase, name in enumerate(plan.strategy.phases):
        run = partial(tasks.run_local, seed=plan.seed, round_index=t)
        locals_ = []
        for i, (shard, worker) in enumerate(zip(plan.shards, plan.placement, strict=True)):
            received = received_key if received_key else {}
            task = (
                run,
                plan.strategy,
                phase,
                plan.spec,
                shard,
                plan.weights,
                received,
                previous_locals[i],
                plan.shard_states[i] if plan.shard_states is not None else None,
            )
            depends = [k for k in (received_key, previous_locals[i]) if k]
            locals_.append(b.add(b.key(name, t, i), task, depends=depends, worker=worker))
        total_key = _reduce_tree(b, locals_, plan.placement, f"reduce_{name}", t)
        if phase < len(plan.strategy.phases) - 1:
            # What the next phase receives, straight from the sum (the rest of finishing a
            # phase, its metrics and byte counts, waits for the update, off the critical path).
            received_key = b.add(
                b.key(f"broadcast_{name}", t),
                (tasks.phase_broadcast, plan.strategy, phase, plan.weights, total_key),
                depends=[total_key],
                worker=root,
            )
        previous_locals = locals_
        totals.append(total_key)
    next_states = None
    if plan.shard_states is not None:  # each shard's state for the next round, from its worker
        next_states = [
            b.add(b.key("shard_state", t, i), (tasks.shard_state_of, k), depends=[k], worker=w)
            for i, (k, w) in enumerate(zip(previous_locals, plan.placement, strict=True))
        ]
    # Each phase is finished (averaged, its bytes counted) inside the update: one task and
    # one scheduling hop, where a finish task per phase cost a hop before the update.
    result = b.add(
        b.key("update", t),
        (
            tasks.update_round,
            plan.strategy,
            plan.weights,
            plan.state,
            totals,
            num_receivers,
            partials_moved,
            next_states,
        ),
        depends=totals + (next_states or []),
        worker=root,
    )
    weights = b.add(
        b.key("weights", t), (tasks.round_weights, result), depends=[result], worker=root
    )
    state = b.add(b.key("state", t), (tasks.round_state, result), depends=[result], worker=root)
    evaluation = None
    if plan.test_shard is not None:
        evaluation = b.add(
            b.key("evaluate", t),
            (tasks.evaluate, plan.spec, plan.test_shard, weights),
            depends=[weights],
            worker=plan.test_worker,  # the weights travel, never the test split
        )
    keys = RoundKeys(result=result, weights=weights, state=state, evaluation=evaluation)
    return b.graph(), keys


@dataclass
class _Node:
    """A node of the pairwise reduction tree while the graph is built."""

    worker: str
    leaves: list[str]  # shard-task keys below it, in shard order
    key: str | None = None  # its task (a leaf: the shard's own task), once one exists
    local: bool = True  # all its leaves on `worker`: summed by one task there


def _reduce_tree(b: _GraphBuilder, keys: list[str], placement: list[str], name: str, t: int) -> str:
    """The pairwise sum over shards (aggregate.tree_reduce's order); returns the root's key.

    Where a whole subtree lives on one worker, one task sums it there (in the same pairwise
    order): a worker's shards cost one scheduling hop, not one per tree level. The merges
    above, across workers, are one task each, pinned to the worker of their first input, so
    only partial sums cross (aggregate.cross_worker_merges counts them).
    """
    level = [_Node(worker=w, leaves=[k], key=k) for k, w in zip(keys, placement, strict=True)]
    depth = 0
    while len(level) > 1:
        depth += 1
        merged = []
        for j, group in enumerate(reduction_groups(len(level))):
            nodes = [level[i] for i in group]
            if len(nodes) == 1:
                merged.append(nodes[0])
            elif all(n.local for n in nodes) and nodes[0].worker == nodes[1].worker:
                merged.append(
                    _Node(worker=nodes[0].worker, leaves=nodes[0].leaves + nodes[1].leaves)
                )
            else:
                parts = [_materialize(b, n, name, t) for n in nodes]
                key = b.add(
                    b.key(name, t, depth, j),
                    (tasks.combine, *parts),
                    depends=parts,
                    worker=nodes[0].worker,
                )
                merged.append(_Node(worker=nodes[0].worker, leaves=[], key=key, local=False))
        level = merged
    if len(keys) == 1:  # a single shard: its report still becomes a sum (a Partial)
        level[0].key = None
    return _materialize(b, level[0], name, t)


def _materialize(b: _GraphBuilder, node: _Node, name: str, t: int) -> str:
    """The node's task: for a subtree on one worker, one pairwise sum over its leaves there."""
    if node.key is None:
        node.key = b.add(
            b.key(name, t, "local", node.leaves[0].split("-")[2]),
            (tasks.combine_tree, *node.leaves),
            depends=node.leaves,
            worker=node.worker,
        )
    return node.key
