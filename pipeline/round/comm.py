"""Communication accounting: the bytes an algorithm must move per round, in one pure module.

What is counted is what moves between workers, from the tensors themselves (never an
estimate by the algorithm), for the run's collective (`--broadcast`, graph.py):
- allgather: each worker sends the sums of its whole subtrees (aggregate.owned_nodes) to each
  of the W - 1 others; no input moves, each worker forming the next phase's input itself and
  starting the next round from its own copy of the update;
- reduce: the other workers send their subtree sums to the first worker, which sends each
  phase's input (the weights and the round's opening in phase 0, a later phase's broadcast)
  back out, one copy to each of the W - 1 others.
graph.py places the tasks so that these are the only transfers; tasks.py counts each phase
with `phase_bytes` when it finishes, and reference.py does the same for the layout the Dask
run has; `dane bench scaling` checks the count against Dask's own transfer logs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch

from .aggregate import owned_nodes
from .transport import collective_of as collective_of


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How a round's data moves: the collective, and the copies it makes of a phase's input
    and of a subtree's sum for the shards' placement."""

    collective: str = "allgather"  # COLLECTIVES
    inputs_moved: int = 0  # copies of a phase's input sent to workers
    partials_moved: int = 0  # subtree sums sent between workers in one phase
    transport: str = "float32"  # the subtree sums' encoding on the wire (transport.py)


def layout(
    placement: list[str], collective: str = "allgather", transport: str = "float32"
) -> Layout:
    """The layout of shards placed on these workers (one entry per shard)."""
    workers = list(dict.fromkeys(placement))
    sums = [len(owned_nodes(placement, worker)) for worker in workers]
    if collective == "reduce":  # to the first worker, and its phase inputs back out
        moved, inputs = sum(sums[1:]), len(workers) - 1
    else:  # every worker's sums to every other worker
        moved, inputs = sum(sums) * (len(workers) - 1), 0
    return Layout(
        collective=collective, inputs_moved=inputs, partials_moved=moved, transport=transport
    )


def phase_bytes(*, incoming: int, outgoing: int, layout: Layout) -> int:
    """Bytes a phase moves: its input (`incoming` bytes a copy) and its subtree sums
    (`outgoing` bytes each), as often as the layout sends them."""
    return incoming * layout.inputs_moved + outgoing * layout.partials_moved


def payload_bytes(value: Any) -> int:
    """Bytes of every tensor in a value (a tensor, or dicts, lists and dataclasses of them):
    what moving them costs on the wire."""
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
    """Bytes a round moves between the driver and the workers that `phase_bytes` leaves out:
    its fetch of the round's result (the weights, the strategy's state, the shards' states),
    to record and checkpoint it. The Dask driver counts its own (pipelined.py: the fetch,
    and the carry it sends where the chain of rounds (re)starts); the reference's rows
    carry this, the fetch of a round in the middle of the chain."""
    return payload_bytes([weights, state, shard_states])
