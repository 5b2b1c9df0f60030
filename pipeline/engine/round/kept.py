"""What a worker keeps between its tasks: its shards' reports from one phase of a round to
the next, and the round's update it made last.

A phase's shards report to the next phase on their own worker (DANE's local solve takes its
shard's local gradient): only the subtree sums travel to the other workers. Held as the
phase task's result, the reports would make the others either fetch them too or wait for a
second task that splits the sums off (one more dependent step in every round). So the phase
task's result is the sums alone, and the reports wait here, in the worker's process, for the
worker's next phase.

This is a cache, never the only copy: a report not found here (the next phase ran on another
worker after a fault or a steal, or an entry was evicted) is computed again by its shard,
from the same inputs and seed, so it is the same to the last bit (worker_round.py).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# Chains (a run's token and attempt) whose entries are kept: the current one, and one before
# (a run on another cluster's worker, or a chain restarted after a fault) until it ends.
CHAINS_KEPT = 2

_lock = threading.Lock()
_chains: OrderedDict[str, dict[tuple[int, int, int], Any]] = OrderedDict()
# Per chain, the last round whose update this worker made, and a weak reference to it.
_updates: OrderedDict[str, tuple[int, weakref.ref]] = OrderedDict()


def put(chain: str, round_index: int, phase: int, reports: dict[int, Any]) -> None:
    """Keep phase `phase`'s reports of round `round_index` (by shard) for the next phase.

    Entries of the chain's earlier rounds are dropped: a round starts after the one before
    it has ended on every worker, so nothing will take them."""
    with _lock:
        entries = _chains.pop(chain, {})
        entries = {key: value for key, value in entries.items() if key[0] >= round_index}
        entries.update({(round_index, phase, shard): r for shard, r in reports.items()})
        _chains[chain] = entries
        while len(_chains) > CHAINS_KEPT:
            _chains.popitem(last=False)


def take(chain: str, round_index: int, phase: int, shard: int) -> Any | None:
    """The report kept for this shard's phase of the round, removed; None if none is kept."""
    with _lock:
        return _chains.get(chain, {}).pop((round_index, phase, shard), None)


def update_once(chain: str, round_index: int, make: Callable[[], Any]) -> Any:
    """Round `round_index`'s update as this worker made it first, else make() (and note it).

    Under allgather a worker needs a round's update in several tasks: its update task, and
    inline its scoring, its figures and the next round's first phase (graph.py), each from
    the same inputs. Made once, it is a few passes over the weights: at ResNet-18's size on a
    CPU a tenth of a second a time. The update task runs first (its round was submitted
    first) and Dask holds its result while later tasks need it; only a weak reference is
    noted here, so nothing outlives Dask's copy. Not found, it is made again, to the same
    bits."""
    with _lock:
        noted = _updates.get(chain)
    update = noted[1]() if noted is not None and noted[0] == round_index else None
    if update is not None:
        return update
    update = make()
    with _lock:
        noted = _updates.pop(chain, None)
        newer = noted is not None and noted[0] > round_index  # a later round went ahead
        _updates[chain] = noted if newer else (round_index, weakref.ref(update))
        while len(_updates) > CHAINS_KEPT:
            _updates.popitem(last=False)
    return update


def clear() -> None:
    """Forget everything kept (tests)."""
    with _lock:
        _chains.clear()
        _updates.clear()
