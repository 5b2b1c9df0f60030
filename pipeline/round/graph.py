"""One round as a Dask task graph, chained to the round before it on the cluster.

Per phase p and worker k: `{phase}-{t}-{k}` runs phase p on all of worker k's shards and sums
its whole subtrees (worker_round.py). Where that output also holds what only worker k needs
(its shards' reports for its next phase, or their states for its next round), a small
`nodes_{phase}-{t}-{k}` task on the same worker hands on the sums alone; else the output
itself travels. Then the run's collective (comm.collective_of, `--broadcast`):
- allgather: every worker takes every worker's sums, finishes the phase itself and, after the
  last phase, runs `update-{t}-{k}`, so every worker holds round t's result;
- reduce: the first worker takes the sums, finishes the phase once (`reduce_{phase}-{t}-0`)
  and, after the last, runs the one `update-{t}-0`; the other workers fetch each phase's end
  and the update from it (the fan-out: Dask's own transfers, one copy to each).
Round t + 1's tasks on worker k take round t's update where worker k finds it. Both sum in
aggregate.py's pairwise order, so their results are the same to the last bit.

Dependent steps on a round's critical path: one per phase, one more per phase whose output is
split, the update, and with reduce one per finished phase: DANE 4 (allgather) or 5 (reduce).
Builds the graph; computes nothing. Keys carry the run's token (and the chain's attempt).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from . import tasks, worker_round
from .aggregate import owned_nodes
from .worker_round import RoundStatic


@dataclass(frozen=True, kw_only=True)
class ShardSet:
    """The run's data on the cluster: shard futures (held for the whole run), where each
    shard lives now, and the scoring pieces' futures (scoring.py), one per shard, each
    loaded on its shard's worker and scored there."""

    token: str  # the run's token, in every key of its tasks
    shards: list[Any]  # Futures of ShardData, in shard order
    placement: list[str]  # the worker address that holds each shard
    test: list[Any]


@dataclass(frozen=True, kw_only=True)
class ChainLink:
    """Where round t starts: per worker, what it takes as the carry (a future of a
    RoundResult the driver scattered, or round t - 1's update) and, for strategies with shard
    states, its output of round t - 1's last phase (None when the carry holds the states)."""

    carry: list[Any]
    before: list[Any] | None = None


@dataclass(frozen=True, kw_only=True)
class RoundKeys:
    updates: list[str]  # round t's result, per worker where it is taken (the next carry)
    last_phase: list[str]  # every worker's output of the last phase (its shards' states)
    evaluation: str | None  # the test split's loss and accuracy, if evaluated

    def link(self, with_states: bool) -> ChainLink:
        """Where the next round starts, as keys of this one."""
        return ChainLink(carry=self.updates, before=self.last_phase if with_states else None)


def _keys_in(value: Any) -> list[str]:
    """The strings in a task's arguments, lists included: the keys it may depend on."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [key for item in value for key in _keys_in(item)]
    return []


@dataclass
class _Builder:
    """Collects one layer per task, each pinned to its worker."""

    token: str
    index: int
    layers: dict[str, MaterializedLayer] = field(default_factory=dict)
    deps: dict[str, set[str]] = field(default_factory=dict)

    def add(self, name: str, k: int, task: tuple, worker: str) -> str:
        key = f"{name}-{self.index}-{k}-{self.token}"
        # allow_other_workers: a lost worker's tasks run elsewhere (its shards reload there).
        annotations = {"workers": [worker], "allow_other_workers": True}
        self.layers[key] = MaterializedLayer({key: task}, annotations=annotations)
        self.deps[key] = {a for a in _keys_in(task) if a in self.layers}
        return key


def build_round(
    static: RoundStatic,
    *,
    shards: list[Any],
    placement: list[str],
    link: ChainLink,
    token: str,
    evaluate: list[Any] | None = None,
) -> tuple[HighLevelGraph, RoundKeys]:
    """Round `static.index`'s graph: `shards` are the shard futures, `placement` where each
    lives, `evaluate` the scoring pieces' futures, one per shard (None: no evaluation this
    round), each scored on its shard's worker and combined on the first."""
    b = _Builder(token=token, index=static.index)
    workers = list(dict.fromkeys(placement))
    held = [[s for s, w in zip(shards, placement, strict=True) if w == at] for at in workers]
    # One worker has no one to fan out to: reduce is then allgather, a step shorter.
    reduce = static.layout.collective == "reduce" and len(workers) > 1
    shared: list[list[str]] = []  # per phase: what leaves each worker of its output
    ended: str | list = []  # reduce: the first worker's finished phases (a key, once one is)
    own: list[str | None] = [None] * len(workers)
    for p, name in enumerate(static.strategy.phases):
        received = ended if reduce else [list(outputs) for outputs in shared]
        own = [
            b.add(
                name,
                k,
                (
                    worker_round.run_worker_phase,
                    static,
                    p,
                    held[k],
                    owned_nodes(placement, worker),
                    link.carry[k],
                    received,
                    own[k],
                    link.before[k] if link.before is not None else None,
                ),
                worker,
            )
            for k, worker in enumerate(workers)
        ]
        shared.append(_shared(b, static, p, own, workers))
        if reduce and p < len(static.strategy.phases) - 1:
            task = (worker_round.end_phase, static, link.carry[0], ended, shared[-1])
            ended = b.add(f"reduce_{name}", 0, task, workers[0])
    updates = _updates(b, static, link, shared, ended if reduce else None, workers)
    evaluation = None
    if evaluate is not None:
        scores = []
        for k, worker in enumerate(workers):  # one task a worker, its own pieces
            indices = [i for i, at in enumerate(placement) if at == worker]
            pieces = [evaluate[i] for i in indices]
            task = (worker_round.score_result, static.spec, indices, pieces, updates[k])
            scores.append(b.add("score", k, task, worker))
        evaluation = b.add("evaluate", 0, (tasks.combine_scores, *scores), workers[0])
    graph = HighLevelGraph(b.layers, b.deps)
    return graph, RoundKeys(updates=updates, last_phase=list(own), evaluation=evaluation)


def _updates(
    b: _Builder,
    static: RoundStatic,
    link: ChainLink,
    shared: list[list[str]],
    ended: str | list | None,
    workers: list[str],
) -> list[str]:
    """The round's update, per worker: made on each (allgather), or once on the first worker
    from the phases it finished (`ended`, reduce), every worker then taking that one."""
    if ended is not None:
        task = (worker_round.update_on_worker, static, link.carry[0], ended, shared[-1])
        return [b.add("update", 0, task, workers[0])] * len(workers)
    earlier = [list(outputs) for outputs in shared[:-1]]
    return [
        b.add(
            "update",
            k,
            (worker_round.update_on_worker, static, link.carry[k], earlier, shared[-1]),
            w,
        )
        for k, w in enumerate(workers)
    ]


def _shared(
    b: _Builder, static: RoundStatic, p: int, outputs: list[str], workers: list[str]
) -> list[str]:
    """What leaves each worker of phase p's outputs: the outputs themselves, or where they
    hold more than the sums (reports for the next phase, shard states), the sums alone,
    split off on each worker. One worker alone has no one to hand its sums to."""
    last = p == len(static.strategy.phases) - 1
    keeps_more = not last or static.strategy.shard_state_type is not None
    if not keeps_more or len(workers) == 1:
        return outputs
    name = f"nodes_{static.strategy.phases[p]}"
    return [
        b.add(name, k, (worker_round.nodes_of, out), w)
        for k, (out, w) in enumerate(zip(outputs, workers, strict=True))
    ]
