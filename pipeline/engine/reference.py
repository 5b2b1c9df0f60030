"""The oracle: the same Strategy over the same shards, in one process, without Dask.

It calls the same per-shard functions as the workers and reduces in the same tree order, but
its orchestration is a plain loop, so a bug in the graph (a wrong dependency, a stale input, a
shard used twice) shows up as a difference between `train` and `run_reference`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from .plan import RunSetup
from .protocol import Broadcast
from .round import comm, tasks, transport
from .round.aggregate import Partial, node_sum, owned_nodes, sendable, shard_placement, tree_reduce
from .round.scoring import combine_scores, score_pieces
from .round.shards import ShardData
from .round.worker import WorkerPhase, phase_total
from .run.metrics import round_row
from .run.run_state import RunState, round_start


class ReferenceRun(RunState):
    """Where the reference run ended: the RunState it advanced (weights, driver state, shard
    states), with its metrics rows (as metrics.jsonl would hold them) as `history` too."""

    @property
    def history(self) -> list[dict[str, Any]]:
        """The rounds' metrics rows, the run's own (RunState.rows)."""
        return self.rows


def run_reference(
    setup: RunSetup,
    *,
    rounds: int,
    num_workers: int,
    on_round: Callable[[RunState], None] | None = None,
) -> ReferenceRun:
    """Run rounds 1..rounds; `num_workers` only sets the communication count. `on_round` sees
    the run after each round (its weights, its rows so far): what a benchmark measures there."""
    config = setup.config
    shards = [setup.load_train(i) for i in range(setup.store.num_shards)]
    pieces = setup.load_pieces()  # the scoring pieces the workers score, the same sums
    # Only for the communication count: where the Dask run would place the shards.
    placement = shard_placement(len(shards), [f"worker-{k}" for k in range(num_workers)])
    state = ReferenceRun.fresh(setup)
    for t in range(1, rounds + 1):
        started = time.perf_counter()
        round_input, opening = round_start(setup, state, placement)
        result = _round(round_input, shards, state, opening, placement)
        evaluation = None
        if t % config.eval_every == 0 or t == rounds:
            every = list(range(len(pieces)))  # one group: sums in piece order, as on workers
            scored = score_pieces(setup.spec, every, pieces, result)
            evaluation = combine_scores(scored)
        row = round_row(
            round_index=t,
            strategy=setup.strategy,
            result=result,
            evaluation=evaluation,
            wall_s=time.perf_counter() - started,  # the benchmarks' baseline round
            totals=state.advance(result, evaluation),
        )
        state.rows.append(row)
        if on_round is not None:
            on_round(state)
    return state


def _round(
    round_input: tasks.RoundInput,
    shards: list[ShardData],
    state: RunState,
    opening: Broadcast | None,
    placement: list[str],
) -> tasks.RoundResult:
    """One round: every phase's local work, pairwise sums and end, then the update.

    `opening` is what phase 0 receives (run_state.round_start), as the Dask run's does;
    `placement` where the Dask run's shards are (for a lossy --transport: what travels).
    """
    ended: list[tasks.PhaseEnd] = []
    previous: list[Any] = [None] * len(shards)
    strategy = round_input.strategy
    for phase in range(len(strategy.phases)):
        previous_end = ended[-1] if ended else None
        received = previous_end or opening
        leaves = [
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
        total = _phase_sum(round_input.layout, leaves, placement, state.weights)
        previous = leaves
        if phase < len(strategy.phases) - 1:
            ended.append(tasks.finish_phase(round_input, phase, total, previous_end, state.weights))
    result = tasks.update_round(round_input, state.weights, state.state, ended, total)
    if state.shard_states is None:
        return result
    next_states = [leaf.output.shard_state for leaf in previous]
    return dataclasses.replace(result, shard_states=next_states)


def _phase_sum(
    layout: comm.Layout, leaves: list[Partial], placement: list[str], weights: torch.Tensor
) -> Any:
    """The phase's sum over all shards. With a lossy transport, as the Dask round forms it:
    each worker's subtree sums encoded, then the tree completed from
    them decoded (worker.phase_total); else the pairwise tree of the shards' outputs."""
    if transport.is_lossless(layout.transport):
        return tree_reduce(leaves)
    by_leaf = {(0, i): leaf for i, leaf in enumerate(leaves)}

    def sent_by(worker: str) -> WorkerPhase:
        nodes = owned_nodes(placement, worker)
        sums = {node: sendable(node_sum(node, by_leaf, len(leaves))) for node in nodes}
        return WorkerPhase(
            nodes={n: transport.encode(p, weights, layout.transport) for n, p in sums.items()}
        )

    sent = [sent_by(worker) for worker in dict.fromkeys(placement)]
    return phase_total(sent, len(leaves), weights, layout.transport)
