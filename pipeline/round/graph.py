"""One round as one Dask task graph. Builds the graph; computes nothing.

Per phase p of the strategy, for every shard i: `{phase}-{round}-{i}` runs on the worker that
holds shard i; a pairwise tree of `reduce_{phase}` tasks sums the outputs on the workers;
`broadcast_{phase}` finishes the phase once (its average, what the next phase receives, its
byte count), and both the next phase and the update take its output. `update-{round}`
finishes the last phase and ends the round with the new weights, and `evaluate-{round}`
scores them on the test split. Keys carry a run token after the numbers so that two runs on
one scheduler never share a key; Dask's dashboard groups tasks by the leading name, so the
task stream reads `local_grad`, `local_solve`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from . import tasks
from .aggregate import reduction_groups
from .topology import TREE_FROM_WORKERS, chains_rounds, fan_out_plan, use_tree  # noqa: F401


@dataclass(frozen=True, kw_only=True)
class ShardSet:
    """The run's data on the cluster: shard futures (held for the whole run), where each
    shard lives now, and the test split's future and worker."""

    token: str  # the run's token, in every key of its tasks
    shards: list[Any]  # Futures of ShardData, in shard order
    placement: list[str]  # the worker address that holds each shard
    # Futures of the scoring pieces (scoring.py), one per shard, each loaded on its shard's
    # worker and scored there.
    test: list[Any]


@dataclass(frozen=True, kw_only=True)
class RoundPlan:
    """The driver's one input for a round: what its graph is built from.

    `round_input` is plain data that every task receives; the rest are futures the driver
    scattered for this round, and the run's data.
    """

    round_input: tasks.RoundInput
    token: str  # in every key: the run's token and the attempt (a retry's keys are new)
    weights: Any  # Future of the weights tensor, on the worker of shard 0
    state: Any  # Future of the strategy's driver state, there too
    shard_states: list[Any] | None  # Futures of each shard's own state, on its worker
    data: ShardSet
    evaluate: bool = True  # score the new weights on the test split
    opening: Any = None  # Future of the round's opening (a Broadcast), or None if it has none
    broadcast: str = "auto"  # how a phase's input reaches the workers: direct | tree | auto


def placeholder_plan(
    round_input: tasks.RoundInput, placement: list[str], *, token: str, evaluate: bool = True
) -> RoundPlan:
    """A plan whose futures are placeholder names (shard0, w, ...), for building a round's
    graph without a cluster: to count its tasks and dependent steps, or to test its shape."""
    data = ShardSet(
        token=token,
        shards=[f"shard{i}" for i in range(len(placement))],
        placement=placement,
        test=[f"piece{i}" for i in range(len(placement))],
    )
    return RoundPlan(
        round_input=round_input,
        token=token,
        weights="w",
        state="s",
        shard_states=None,
        data=data,
        evaluate=evaluate,
    )


@dataclass(frozen=True, kw_only=True)
class RoundKeys:
    result: str  # the update: a tasks.RoundResult
    evaluation: str | None  # the test split's loss and accuracy, if evaluated


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
    round_input, data = plan.round_input, plan.data
    t, phases = round_input.index, round_input.strategy.phases
    # Everything central (finishing phases, the update) runs where the reduction tree ends:
    # the worker of shard 0. Pinning it, and each merge where its first input is, makes the
    # transfers exactly those comm.py counts; the driver scatters the weights there.
    root = data.placement[0]
    tree = use_tree(plan.broadcast, data.placement)
    weights_at = _fan_out(b, plan.weights, data.placement, "relay_weights", t, tree)
    ended: list[str] = []  # each finished phase: the next phase's input, and the update's
    locals_: list[str | None] = [None] * len(data.shards)  # the phase's shard tasks
    for phase, name in enumerate(phases):
        previous_end = ended[-1] if ended else None
        received = previous_end or plan.opening  # a future (the opening) is not a layer here
        received_at = _fan_out(b, received, data.placement, f"relay_{name}", t, tree)
        locals_ = _shard_tasks(b, plan, phase, weights_at, received_at, locals_)
        total = _reduce_tree(b, locals_, data.placement, f"reduce_{name}", t)
        if phase == len(phases) - 1:
            break
        # The phase's average and broadcast, made once: the next phase's shards and the
        # update both take this task's output.
        finish = (tasks.finish_phase, round_input, phase, total, previous_end, plan.weights)
        key = b.key(f"broadcast_{name}", t)
        ended.append(b.add(key, finish, depends=[total, *ended[-1:]], worker=root))
    next_states = None
    if plan.shard_states is not None:  # each shard's state for the next round, from its worker
        next_states = [
            b.add(b.key("shard_state", t, i), (tasks.shard_state_of, k), depends=[k], worker=w)
            for i, (k, w) in enumerate(zip(locals_, data.placement, strict=True))
        ]
    # The last phase is finished inside the update: one task and one scheduling hop.
    result = b.add(
        b.key("update", t),
        (tasks.update_round, round_input, plan.weights, plan.state, ended, total, next_states),
        depends=[*ended, total, *(next_states or [])],
        worker=root,
    )
    evaluation = _evaluation(b, plan, result)  # before b.graph(): it copies the layers
    return b.graph(), RoundKeys(result=result, evaluation=evaluation)


def _shard_tasks(
    b: _GraphBuilder,
    plan: RoundPlan,
    phase: int,
    weights_at: dict[str, Any],
    received_at: dict[str, Any],
    previous: list[str | None],
) -> list[str]:
    """Phase `phase`'s task for every shard, on the shard's worker, taking the weights and the
    phase's input where that worker finds them (_fan_out) and the shard's previous output."""
    name, t = plan.round_input.strategy.phases[phase], plan.round_input.index
    keys = []
    for i, (shard, worker) in enumerate(zip(plan.data.shards, plan.data.placement, strict=True)):
        own_state = plan.shard_states[i] if plan.shard_states is not None else None
        inputs = (weights_at[worker], received_at[worker], previous[i])
        task = (tasks.run_local, plan.round_input, phase, shard, *inputs, own_state)
        depends = [k for k in inputs if k in b.layers]  # not futures, nor None
        keys.append(b.add(b.key(name, t, i), task, depends=depends, worker=worker))
    return keys


def _evaluation(b: _GraphBuilder, plan: RoundPlan, result: str) -> str | None:
    """The new weights' score, if the plan asks for one: each shard's worker scores its piece
    (the new weights and buffers travel to it, never a piece), and one task adds the sums."""
    if not plan.evaluate:
        return None
    t, root, spec = plan.round_input.index, plan.data.placement[0], plan.round_input.spec
    weights = b.add(b.key("weights", t), (tasks.round_model, result), depends=[result], worker=root)
    scores = []
    for k, worker in enumerate(dict.fromkeys(plan.data.placement)):  # one task a worker
        indices = [i for i, at in enumerate(plan.data.placement) if at == worker]
        pieces = [plan.data.test[i] for i in indices]
        task = (tasks.score_model, spec, indices, pieces, weights)
        scores.append(b.add(b.key("score", t, k), task, depends=[weights], worker=worker))
    return b.add(b.key("evaluate", t), (tasks.combine_scores, *scores), depends=scores, worker=root)


def _fan_out(
    b: _GraphBuilder, source: Any, placement: list[str], name: str, t: int, tree: bool
) -> dict[str, Any]:
    """Where each worker takes `source` (a key or a future, on the root worker) from.

    Direct: every worker fetches it from the root, whose link then carries W - 1 copies in
    turn. Tree: worker k copies it from worker k - 2^floor(log2 k) by a `relay` task, one
    level at a time (a level's relays wait for the previous level's tiny `_done` markers,
    else the root would serve its children of every level at once): each level doubles the
    holders, ceil(log2 W) copies in turn. The values are the same objects either way, so
    results do not change by a bit.
    """
    workers = list(dict.fromkeys(placement))
    if source is None or not tree:
        return dict.fromkeys(workers, source)
    plan = fan_out_plan(len(workers), tree=True)
    copies, before = {workers[0]: source}, []
    for level, copies_of_level in enumerate(plan):
        markers = []
        for parent, k in copies_of_level:
            held = copies[workers[parent]]
            key = b.add(
                b.key(name, t, k),
                (relay, held, *before),
                depends=([held] if held in b.layers else []) + before,
                worker=workers[k],
            )
            copies[workers[k]] = key
            if level + 1 < len(plan):  # the next level waits for this one
                marker = b.key(f"{name}_done", t, k)
                markers.append(b.add(marker, (relayed, key), depends=[key], worker=workers[k]))
        before = markers
    return copies


def relay(value: Any, *after: None) -> Any:
    """A task's identity: the value, now held on this task's worker too (_fan_out); `after`
    are the markers of the level before, which only order it."""
    return value


def relayed(value: Any) -> None:
    """A marker that a relay holds its copy: tiny, so waiting on it moves no tensor."""
    return None


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
    only partial sums cross (comm.cross_worker_merges counts them).
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
