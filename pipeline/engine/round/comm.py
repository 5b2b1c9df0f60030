"""Communication accounting: the bytes an algorithm must move per round, in one pure module.

What is counted is what moves between workers, from the tensors themselves (never an
estimate by the algorithm), for the round's all-gather (graph.py): each worker sends the sums
of its whole subtrees (aggregate.owned_nodes) to each of the W - 1 others; no input moves,
each worker forming the next phase's input itself and starting the next round from its own
copy of the update. graph.py places the tasks so that these are the only transfers;
tasks.py counts each phase with `phase_bytes` when it finishes, and reference.py does the
same for the layout the Dask run has; `dane bench scaling` checks the count against Dask's
own transfer logs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch

from .aggregate import owned_nodes


@dataclass(frozen=True, kw_only=True)
class Layout:
    """How a round's data moves: the copies the all-gather makes of a subtree's sum for the
    shards' placement, and their encoding."""

    partials_moved: int = 0  # subtree sums sent between workers in one phase
    transport: str = "float32"  # the subtree sums' encoding on the wire (transport.py)


def layout(placement: list[str], *, transport: str = "float32") -> Layout:
    """The layout of shards placed on these workers (one entry per shard): every worker's
    subtree sums to every other worker."""
    workers = list(dict.fromkeys(placement))
    sums = sum(len(owned_nodes(placement, worker)) for worker in workers)
    return Layout(partials_moved=sums * (len(workers) - 1), transport=transport)


def phase_bytes(*, outgoing: int, layout: Layout) -> int:
    """Bytes a phase moves: its subtree sums (`outgoing` bytes each), as often as the layout
    sends them. No phase input moves: each worker forms it from the sums it holds."""
    return outgoing * layout.partials_moved


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
