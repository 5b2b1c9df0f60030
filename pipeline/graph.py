"""One round as one Dask task graph. Builds the graph; computes nothing.

Per phase p of the strategy, for every shard i: `{phase}-{round}-{i}` runs on the worker that
holds shard i; a pairwise tree of `reduce_{phase}` tasks sums the outputs on the workers;
`finish_{phase}` averages and prepares what the next phase receives. `update-{round}` ends the
round with the new weights, and `evaluate-{round}` scores them on the test split. Keys carry a
run token after the numbers so that two runs on one scheduler never share a key; Dask's
dashboard groups tasks by the leading name, so the task stream reads `local_grad`,
`local_solve`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline import tasks
from dask_dane.pipeline.aggregate import reduction_groups
from dask_dane.pipeline.algorithms.base import Strategy


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
    received_key: str | None = None
    previous_locals: list[str | None] = [None] * len(plan.shards)
    end_key: str | None = None
    totals, ends = [], []
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
        total_key = _reduce_tree(b, locals_, f"reduce_{name}", t)
        end_key = b.add(
            b.key(f"finish_{name}", t),
            (
                tasks.finish_phase,
                plan.strategy,
                phase,
                plan.weights,
                total_key,
                end_key,
                num_receivers,
            ),
            depends=[k for k in (total_key, end_key) if k],
        )
        received_key = b.add(
            b.key(f"broadcast_{name}", t), (tasks.sent_tensors, end_key), depends=[end_key]
        )
        previous_locals = locals_
        totals.append(total_key)
        ends.append(end_key)
    next_states = None
    if plan.shard_states is not None:  # each shard's state for the next round, from its worker
        next_states = [
            b.add(b.key("shard_state", t, i), (tasks.shard_state_of, k), depends=[k], worker=w)
            for i, (k, w) in enumerate(zip(previous_locals, plan.placement, strict=True))
        ]
    result = b.add(
        b.key("update", t),
        (tasks.finish_round, plan.strategy, plan.weights, plan.state, totals, ends, next_states),
        depends=totals + ends + (next_states or []),
    )
    weights = b.add(b.key("weights", t), (tasks.round_weights, result), depends=[result])
    state = b.add(b.key("state", t), (tasks.round_state, result), depends=[result])
    evaluation = None
    if plan.test_shard is not None:
        evaluation = b.add(
            b.key("evaluate", t),
            (tasks.evaluate, plan.spec, plan.test_shard, weights),
            depends=[weights],
        )
    keys = RoundKeys(result=result, weights=weights, state=state, evaluation=evaluation)
    return b.graph(), keys


def _reduce_tree(b: _GraphBuilder, keys: list[str], name: str, t: int) -> str:
    """Pairwise sums up a tree (same order as aggregate.tree_reduce); returns the root key."""
    level = 0
    current = (
        [
            b.add(b.key(name, t, level, i), (tasks.combine, k), depends=[k])
            for i, k in enumerate(keys)
        ]
        if len(keys) == 1
        else keys
    )
    while len(current) > 1:
        level += 1
        current = [
            b.add(
                b.key(name, t, level, j),
                (tasks.combine, *[current[i] for i in group]),
                depends=[current[i] for i in group],
            )
            for j, group in enumerate(reduction_groups(len(current)))
        ]
    return current[0]
