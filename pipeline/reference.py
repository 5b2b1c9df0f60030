"""The oracle: the same Strategy over the same shards, in one process, without Dask.

It calls the same per-shard functions as the workers and reduces in the same tree order, but
its orchestration is a plain loop, so a bug in the graph (a wrong dependency, a stale input, a
shard used twice) shows up as a difference between `train` and `run_reference`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import tasks
from .aggregate import (
    cross_worker_merges,
    shard_placement,
    to_partial,
    tree_reduce,
)
from .algorithms.base import for_round
from .setup import RunSetup, initial_weights


@dataclass
class ReferenceRun:
    weights: torch.Tensor
    state: dict[str, torch.Tensor]
    shard_states: list[dict[str, torch.Tensor]] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def run_reference(
    setup: RunSetup,
    *,
    rounds: int,
    num_workers: int,
    weights: torch.Tensor | None = None,
    state: dict[str, torch.Tensor] | None = None,
    start_round: int = 1,
    shard_states: list[dict[str, torch.Tensor]] | None = None,
) -> ReferenceRun:
    """Run rounds start_round..rounds; `num_workers` only sets the communication count."""
    strategy, config = setup.strategy, setup.config
    w = initial_weights(setup.spec, config.seed) if weights is None else weights
    s = strategy.init_state(w) if state is None else state
    shards = [tasks.load_shard(**setup.shard_args(i)) for i in range(setup.store.num_shards)]
    test = tasks.load_shard(**setup.test_args())
    # Only for the communication count: where the Dask run would place the shards.
    placement = shard_placement(len(shards), [f"worker-{k}" for k in range(num_workers)])
    receivers, partials_moved = len(set(placement)), cross_worker_merges(placement)
    if shard_states is None:
        shard_states = [strategy.init_shard_state(w) for _ in shards]
        shard_states = shard_states if any(shard_states) else None
    run = ReferenceRun(weights=w, state=s, shard_states=shard_states)
    for t in range(start_round, rounds + 1):
        started = time.perf_counter()
        strategy = for_round(setup.strategy, run.state)
        received: dict[str, torch.Tensor] = {}
        previous: list[Any] = [None] * len(shards)
        totals, ends, end = [], [], None
        for phase in range(len(strategy.phases)):
            reports = [
                tasks.run_local(
                    strategy,
                    phase,
                    setup.spec,
                    shard,
                    run.weights,
                    received,
                    previous[i],
                    run.shard_states[i] if run.shard_states is not None else None,
                    seed=config.seed,
                    round_index=t,
                )
                for i, shard in enumerate(shards)
            ]
            total = tree_reduce([to_partial(r) for r in reports])
            moved = tasks.inputs_moved(phase, receivers)
            end = tasks.finish_phase(
                strategy, phase, run.weights, total, end, moved, partials_moved
            )
            received, previous = end.sent.tensors, reports
            totals.append(total)
            ends.append(end)
        next_states = None
        if run.shard_states is not None:
            next_states = [tasks.shard_state_of(report) for report in previous]
        result = tasks.finish_round(strategy, run.weights, run.state, totals, ends, next_states)
        run.weights, run.state = result.weights, result.state
        run.shard_states = result.shard_states
        metrics = {"round": t, **result.metrics}
        if t % config.eval_every == 0 or t == rounds:
            evaluation = tasks.evaluate(setup.spec, test, run.weights)
            metrics.update({f"test_{k}": v for k, v in evaluation.items()})
        metrics["wall_s"] = time.perf_counter() - started  # the benchmarks' baseline round
        run.history.append(metrics)
    return run
