"""One all-gather round as a Dask task graph, chained to the round before it on the cluster.

Per phase p and worker k: `{phase}-{t}-{k}` runs phase p on all of worker k's shards and sums
its whole subtrees (worker_round.py). Where that output also holds what only worker k needs
(its shards' reports for its next phase, or their states for its next round), a small
`nodes_{phase}-{t}-{k}` task on the same worker hands the other workers the sums alone; else
they take the output itself. After the last phase every worker runs `update-{t}-{k}` from
every worker's sums, so every worker holds round t's result; round t + 1's tasks on worker k
take it there. Dependent steps on a round's critical path: one per phase, one more per phase
whose output is split, and the update: FedAvg 2, DANE 4 (`critical_steps`).

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
class ChainLink:
    """Where round t starts: per worker, what it takes as the carry (a future of a Carry, or
    round t - 1's update on that worker) and, for strategies with shard states, its output
    of round t - 1's last phase (None when the carry holds the states)."""

    carry: list[Any]
    before: list[Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ChainedKeys:
    updates: list[str]  # round t's result, one copy per worker (the next round's carry)
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


def build_chained_round(
    static: RoundStatic,
    *,
    shards: list[Any],
    placement: list[str],
    link: ChainLink,
    token: str,
    evaluate: list[Any] | None = None,
) -> tuple[HighLevelGraph, ChainedKeys]:
    """Round `static.index`'s graph: `shards` are the shard futures, `placement` where each
    lives, `evaluate` the scoring pieces' futures, one per shard (None: no evaluation this
    round), each scored on its shard's worker and combined on the first."""
    b = _Builder(token=token, index=static.index)
    workers = list(dict.fromkeys(placement))
    held = [[s for s, w in zip(shards, placement, strict=True) if w == at] for at in workers]
    shared: list[list[str]] = []  # per finished phase: what the other workers take of it
    own: list[str | None] = [None] * len(workers)
    for p, name in enumerate(static.strategy.phases):
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
                    [list(outputs) for outputs in shared],
                    own[k],
                    link.before[k] if link.before is not None else None,
                ),
                worker,
            )
            for k, worker in enumerate(workers)
        ]
        shared.append(_shared(b, static, p, own, workers))
    gathered = [list(outputs) for outputs in shared]
    updates = [
        b.add("update", k, (worker_round.update_on_worker, static, link.carry[k], gathered), w)
        for k, w in enumerate(workers)
    ]
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
    return graph, ChainedKeys(updates=updates, last_phase=list(own), evaluation=evaluation)


def _shared(
    b: _Builder, static: RoundStatic, p: int, outputs: list[str], workers: list[str]
) -> list[str]:
    """What the other workers take of phase p's outputs: the outputs themselves, or where
    they hold more than the sums (reports for the next phase, shard states), the sums alone,
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
