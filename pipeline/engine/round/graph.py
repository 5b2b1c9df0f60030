"""One round as a Dask task graph, chained to the round before it on the cluster.

Per phase p and worker k: `{phase}-{t}-{k}` runs phase p on all of worker k's shards and sums
its whole subtrees (worker.py); its result is those sums, and the shards' reports that
its next phase takes wait on the worker (worker.py keeps them). Where the last phase's output
also holds the shards' states for the next round, a small `nodes_{phase}-{t}-{k}` task on the same
worker hands on the sums alone. Then the sums cross by all-gather: every worker takes every
worker's sums and finishes the phase itself, summing in aggregate.py's pairwise order (the
reference's). After the last phase, `update-{t}-{k}` makes round t's result on every worker,
for the round's later phases, its evaluation and the driver. Round t + 1's first task on
worker k does not wait for it: it runs the same update inline (ChainLink.update), from the
same inputs, and finds it already made where the update task ran first (worker.py).

Dependent steps a round adds to the chain: one per phase, and one more where the last
phase's output is split: DANE 2, FedAvg 1, SCAFFOLD 2. Builds the graph; computes nothing.
Keys carry the run's token (and the chain's attempt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from . import worker
from .aggregate import owned_nodes
from .scoring import score_pieces
from .tasks import RoundInput


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
    states, its output of round t - 1's last phase (None when the carry holds the states).

    `update`: per worker, round t - 1's update task itself, which round t's first
    task runs inline rather than wait for the `update` task's result: the update is a few
    vector operations on inputs every worker already holds, so inline it costs no step, and
    each worker makes it once for all its tasks that take it (worker.update_on_worker).
    """

    carry: list[Any]
    before: list[Any] | None = None
    update: list[tuple] | None = None


@dataclass(frozen=True, kw_only=True)
class RoundKeys:
    updates: list[str]  # round t's result, per worker where it is taken (the next carry)
    # Every worker's output of the last phase, which holds its shards' states, for strategies
    # with shard states (the driver fetches them, the next round starts from them); else [].
    states: list[str]
    evaluation: list[str]  # per worker, its pieces' scores ([]: the round is not evaluated)
    figures: str | None = None  # the round's figures without its weights, where built
    # Per worker, the update task (update_on_worker and its arguments, keys as strings) that
    # the next round's first task runs inline.
    update_tasks: list[tuple] | None = None

    def held(self) -> list[str]:
        """The keys the driver holds futures of: the round's results and what the next round
        starts from (link)."""
        held = [self.updates, self.states, self.update_tasks, self.evaluation, self.figures]
        return list(dict.fromkeys(keys_in(held)))

    def link(self, futures: dict[str, Any]) -> ChainLink:
        """Where the next round starts, as the futures of this one's keys."""

        def held(value: Any) -> Any:
            return _each_key(value, lambda key: futures.get(key, key))

        return ChainLink(
            carry=held(self.updates),
            before=held(self.states) if self.states else None,
            update=held(self.update_tasks),
        )


def _each_key(value: Any, swap: Callable[[str], Any]) -> Any:
    """A task's arguments with each string in them (a key it may depend on), lists and tuples
    included, replaced by swap(key)."""
    if isinstance(value, str):
        return swap(value)
    if isinstance(value, list | tuple):
        return type(value)(_each_key(item, swap) for item in value)
    return value


def keys_in(value: Any) -> list[str]:
    """The strings in a task's arguments, lists and tuples included: the keys it may depend
    on (the benchmarks count a chain's dependent steps with it, bench/scaling/introspect.py)."""
    found: list[str] = []
    _each_key(value, found.append)
    return found


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
        self.deps[key] = {a for a in keys_in(task) if a in self.layers}
        return key


def build_round(
    static: RoundInput,
    *,
    shards: list[Any],
    placement: list[str],
    link: ChainLink,
    token: str,
    evaluate: list[Any] | None = None,
    light: bool = False,
) -> tuple[HighLevelGraph, RoundKeys]:
    """Round `static.index`'s graph: `shards` are the shard futures, `placement` where each
    lives, `evaluate` the scoring pieces' futures, one per shard (None: no evaluation this
    round), each scored on its shard's worker; with `light`, a task of the round's figures
    without its weights (the driver's fetch when it does not take them)."""
    static = replace(static, chain=token)
    b = _Builder(token=token, index=static.index)
    workers = list(dict.fromkeys(placement))
    held = [[s for s, w in zip(shards, placement, strict=True) if w == at] for at in workers]
    nodes = [owned_nodes(placement, worker) for worker in workers]
    shared: list[list[str]] = []  # per phase: what leaves each worker of its output
    own: list[str] = []
    for p, name in enumerate(static.strategy.phases):
        received = [list(outputs) for outputs in shared]
        own = []
        for k, w in enumerate(workers):
            # The round's carry: in the first phase, round t - 1's update made inline where the
            # link holds its task, else its result (a carry the driver scattered).
            carry = link.update[k] if p == 0 and link.update is not None else link.carry[k]
            before = link.before[k] if link.before is not None else None
            args = (static, p, held[k], nodes[k], carry, received, before)
            own.append(b.add(name, k, (worker.run_worker_phase, *args), w))
        shared.append(_shared(b, static, p, own, workers))
    updates, update_tasks = _updates(b, static, link, shared, workers)
    made = update_tasks  # the update inline, made once on each worker (worker.py)
    evaluation = _scores(b, static, placement, made, evaluate) if evaluate is not None else []
    # The round's figures without its weights, where the driver does not take them: made
    # inline beside the update, so that they run before the next round's tasks.
    figures = b.add("figures", 0, (worker.stripped, made[0]), workers[0]) if light else None
    graph = HighLevelGraph(b.layers, b.deps)
    states = list(own) if static.strategy.shard_state_type is not None else []
    keys = RoundKeys(
        updates=updates,
        states=states,
        evaluation=evaluation,
        figures=figures,
        update_tasks=update_tasks,
    )
    return graph, keys


def _scores(
    b: _Builder, static: RoundInput, placement: list[str], made: list, evaluate: list[Any]
) -> list[str]:
    """One scoring task a worker, its own shards' pieces, each scoring the round's update made
    inline (`made`): ready as the update is, they run before the next round's first task on
    the worker (the earlier graph's tasks come first), and the driver adds their sums."""
    scores = []
    for k, address in enumerate(dict.fromkeys(placement)):
        indices = [i for i, at in enumerate(placement) if at == address]
        pieces = [evaluate[i] for i in indices]
        task = (score_pieces, static.spec, indices, pieces, made[k])
        scores.append(b.add("score", k, task, address))
    return scores


def _updates(
    b: _Builder, static: RoundInput, link: ChainLink, shared: list[list[str]], workers: list[str]
) -> tuple[list[str], list[tuple]]:
    """The round's update, made on each worker, and each worker's update task, which the next
    round's first task runs inline."""
    earlier = [list(outputs) for outputs in shared[:-1]]
    tasks = [
        (worker.update_on_worker, static, link.carry[k], earlier, list(shared[-1]))
        for k in range(len(workers))
    ]
    updates = [
        b.add("update", k, task, w) for k, (task, w) in enumerate(zip(tasks, workers, strict=True))
    ]
    return updates, tasks


def _shared(
    b: _Builder, static: RoundInput, p: int, outputs: list[str], workers: list[str]
) -> list[str]:
    """What leaves each worker of phase p's outputs: the outputs themselves, or where they
    hold the shards' states as well (the last phase of a strategy with shard states), the
    sums alone, split off on each worker. One worker alone has no one to hand its sums to."""
    last = p == len(static.strategy.phases) - 1
    keeps_more = last and static.strategy.shard_state_type is not None
    if not keeps_more or len(workers) == 1:
        return outputs
    name = f"nodes_{static.strategy.phases[p]}"
    return [
        b.add(name, k, (worker.nodes_of, out), w)
        for k, (out, w) in enumerate(zip(outputs, workers, strict=True))
    ]
