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

from . import comm, tasks
from .aggregate import shard_placement, to_partial, tree_reduce
from .algorithms import Broadcast
from .metrics import round_row
from .run_setup import RunSetup
from .run_state import RunState
from .shards import ShardData


@dataclass
class ReferenceRun:
    """Where the reference run ended, and its metrics rows (as metrics.jsonl would hold)."""

    run: RunState
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def weights(self) -> torch.Tensor:
        return self.run.weights

    @property
    def state(self) -> Any:
        """The strategy's driver state."""
        return self.run.state

    @property
    def shard_states(self) -> list[Any] | None:
        return self.run.shard_states


def run_reference(setup: RunSetup, *, rounds: int, num_workers: int) -> ReferenceRun:
    """Run rounds 1..rounds; `num_workers` only sets the communication count."""
    config = setup.config
    shards = [tasks.load_shard(**setup.shard_args(i)) for i in range(setup.store.num_shards)]
    test = tasks.load_shard(**setup.test_args())
    # Only for the communication count: where the Dask run would place the shards.
    layout = comm.layout(shard_placement(len(shards), [f"worker-{k}" for k in range(num_workers)]))
    reference = ReferenceRun(run=RunState.fresh(setup))
    for t in range(1, rounds + 1):
        started = time.perf_counter()
        state = reference.run
        round_input = tasks.RoundInput(
            strategy=setup.strategy,
            spec=setup.spec,
            seed=config.seed,
            index=t,
            layout=layout,
            round_data=setup.strategy.round_data(state.state),
            opening_bytes=comm.tensor_bytes(setup.strategy.opening(state.state)),
            buffers=state.buffers,
        )
        result = _round(round_input, shards, state)
        evaluation = None
        if t % config.eval_every == 0 or t == rounds:
            evaluation = tasks.evaluate(setup.spec, test, result.weights, result.buffers)
        row = round_row(
            round_index=t,
            algorithm=setup.strategy.name,
            result=result,
            evaluation=evaluation,
            wall_s=time.perf_counter() - started,  # the benchmarks' baseline round
            totals=state,
        )
        state.advance(result, row)
        reference.history.append(row)
    return reference


def _round(
    round_input: tasks.RoundInput, shards: list[ShardData], state: RunState
) -> tasks.RoundResult:
    """One round: every phase's local work, pairwise sums and end, then the update."""
    ended: list[tasks.PhaseEnd] = []
    previous: list[Any] = [None] * len(shards)
    strategy = round_input.strategy
    opening = strategy.opening(state.state)
    for phase in range(len(strategy.phases)):
        previous_end = ended[-1] if ended else None
        received = previous_end or (Broadcast(tensors=opening) if opening else None)
        reports = [
            tasks.run_local(
                round_input,
                phase,
                shard,
                state.weights,
                received,
                previous[i],
                state.shard_states[i] if state.shard_states is not None else None,
            )
            for i, shard in enumerate(shards)
        ]
        total = tree_reduce([to_partial(r) for r in reports])
        previous = reports
        if phase < len(strategy.phases) - 1:
            ended.append(tasks.finish_phase(round_input, phase, total, previous_end, state.weights))
    next_states = None
    if state.shard_states is not None:
        next_states = [tasks.shard_state_of(report) for report in previous]
    return tasks.update_round(round_input, state.weights, state.state, ended, total, next_states)
