"""Communication accounting: the bytes an algorithm must move per round, in one pure module.

What is counted is what moves between processes, from the tensors themselves (never an
estimate by the algorithm). Per phase:
- its input reaches every worker holding shards: the weights in phase 0 (the driver sends one
  copy to the reducing worker, which serves the others), a later phase's broadcast (made on
  the reducing worker, so every other worker receives one copy): `inputs_moved`;
- the partial sums of its output cross between workers in the pairwise reduction tree:
  `cross_worker_merges`.
In the all-gather form (worker_round.py, chosen by topology.chains_rounds) no input moves and
each worker's subtree sums go to every other worker (`layout(..., gathered=True)`).
graph.py and chain_graph.py place the tasks so that these are the only transfers; tasks.py
counts each phase with `phase_bytes` when it finishes, and reference.py does the same for the
layout the Dask run would have; `dane bench scaling` checks the count against Dask's own
transfer logs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch

from .aggregate import owned_nodes, reduction_groups


def tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """Bytes of the tensor payload: what moving these tensors costs on the wire."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True, kw_only=True)
class Layout:
    """What the byte count of a round depends on besides the tensors: where shards live."""

    receivers: int  # workers that hold shards
    partials_moved: int  # partial sums crossing between workers in one reduction
    # The all-gather form (worker_round.py): every worker forms each phase's input itself
    # from the sums it received, and starts the round from its own copy of the last update.
    gathered: bool = False
    transport: str = "float32"  # the subtree sums' encoding on the wire (transport.py)


def layout(placement: list[str], *, gathered: bool = False, transport: str = "float32") -> Layout:
    """The layout of shards placed on these workers (one entry per shard); `gathered`: in
    the all-gather form, where each worker sends the sums of its whole subtrees
    (aggregate.owned_nodes) to each of the others."""
    workers = list(dict.fromkeys(placement))
    if not gathered:
        return Layout(receivers=len(workers), partials_moved=cross_worker_merges(placement))
    sent = sum(len(owned_nodes(placement, worker)) for worker in workers)
    moved = sent * (len(workers) - 1)
    return Layout(receivers=len(workers), partials_moved=moved, gathered=True, transport=transport)


def inputs_moved(phase: int, receivers: int) -> int:
    """Copies of a phase's input that reach the `receivers` workers holding shards."""
    return receivers if phase == 0 else receivers - 1


def phase_bytes(phase: int, *, incoming: int, outgoing: int, layout: Layout) -> int:
    """Bytes phase `phase` moves: its input (`incoming` bytes a copy) to the workers, and its
    partial sums (`outgoing` bytes each) across workers. In the all-gather form no input
    moves: the weights are where the last round left them, a later phase's input is formed
    on each worker from the sums."""
    copies = 0 if layout.gathered else inputs_moved(phase, layout.receivers)
    return incoming * copies + outgoing * layout.partials_moved


def cross_worker_merges(placement: list[str]) -> int:
    """Partial sums that move between workers in the pairwise tree over shards so placed.

    Each merge runs on the worker of its first input (graph.py pins it there), so a merge
    whose second input lives elsewhere moves one partial sum.
    """
    level, moved = list(placement), 0
    while len(level) > 1:
        moved += sum(
            1 for g in reduction_groups(len(level)) if len(g) == 2 and level[g[0]] != level[g[1]]
        )
        level = [level[g[0]] for g in reduction_groups(len(level))]
    return moved


def payload_bytes(value: Any) -> int:
    """Bytes of every tensor in a value (a tensor, or dicts, lists and dataclasses of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(payload_bytes(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return sum(payload_bytes(getattr(value, f.name)) for f in fields(value))
    return 0


def driver_bytes(weights: torch.Tensor, state: Any, shard_states: list[Any] | None) -> int:
    """Bytes a round moves between the driver and the workers that `phase_bytes` leaves out.

    The driver scatters the strategy's state with the weights and gathers both back after
    the update, and each shard's own state goes to its worker and back. Only the weights'
    way out is an algorithm's input (phase 0's first copy); the rest is the driver keeping
    the run, which crosses a real network where the driver runs on another machine.
    """
    shards = payload_bytes(shard_states or [])
    return payload_bytes(weights) + 2 * payload_bytes(state) + 2 * shards
