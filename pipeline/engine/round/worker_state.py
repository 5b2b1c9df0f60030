"""Everything a worker process keeps between its tasks, in one holder (WORKER), with how long
each part lives. Nothing else a worker runs (the engine, models/, datasets/) keeps
module-level state: a test walks them.

- `rounds`: per chain (a run's token and attempt), per round, what the worker made of it
  (worker.py's record: the round as opened, each phase's end, its shards' leaves, its
  update), so each is made once however many tasks need it. CHAINS_KEPT chains, the most
  recently used last; ROUNDS_KEPT rounds a chain. A cache, never the only copy: a missing
  entry is made again from the same inputs and seeds, to the same bits.
- `results`: per segment (`--collective torch`), its last RESULTS_KEPT rounds' results, from
  which the driver restarts after a lost peer (run/segment.py kept_result); this segment's and
  the one before it.
- `architectures`: per thread, the model's module for each ModelSpec, on the meta device
  (round/shards.py architecture): functional_call swaps a module's parameters while it runs,
  so threads never share one. For the process's life: a few specs at most. Each module
  carries its own swap plan (models/flat.py), which lives as long as it does.
- `activation_bytes`: per (model, row shape, dtype), the activation bytes a row costs
  (round/activations.py). For the process's life: a number a model.
- `frames`: whether our dataclasses' tensors travel as frames (round/wire.py); benchmarks
  switch it off to time the in-band pickle, the engine never does.

`clear()` forgets the rounds and results (tests, and a worker reused by another suite).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, TypeVar

# Chains kept: the current one and one before (a run on another cluster's worker, or a chain
# restarted after a fault) until it ends; rounds kept per chain: round t's update is taken
# by round t + 1's first phase and by round t's scoring, which may run after it.
CHAINS_KEPT = 2
ROUNDS_KEPT = 2
# Rounds whose results each rank of a segment keeps after it moved on (the driver restarts
# from the last it recorded, at most two rounds behind), and segments kept.
RESULTS_KEPT = 3
SEGMENTS_KEPT = 2

Record = TypeVar("Record")


class WorkerState:
    """What one worker process keeps between its tasks (the module's docstring says how long)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards `rounds` and `results`: tasks run in threads
        self.rounds: OrderedDict[str, dict[int, Any]] = OrderedDict()
        self.results: OrderedDict[str, deque[tuple[int, Any, Any]]] = OrderedDict()
        self.threads = threading.local()  # .architectures: {ModelSpec: module}
        self.activation_bytes: dict[tuple, int] = {}
        self.frames = True

    def round_record(self, chain: str, index: int, fresh: Callable[[], Record]) -> Record:
        """Round `index` of `chain`'s record (made by `fresh` the first time), the chain
        moved to the most recent, older chains and rounds evicted. The caller mutates the
        record under `lock`."""
        with self.lock:
            rounds = self.rounds.pop(chain, {})
            self.rounds[chain] = rounds  # the most recent chain last
            while len(self.rounds) > CHAINS_KEPT:
                self.rounds.popitem(last=False)
            record = rounds.get(index)
            if record is None:
                record = rounds[index] = fresh()
            for old in sorted(rounds)[:-ROUNDS_KEPT]:
                del rounds[old]
            return record

    def keep_result(self, segment: str, index: int, result: Any, states: Any) -> None:
        """Round `index`'s result in `segment`, with this rank's shards' states."""
        with self.lock:
            kept = self.results.setdefault(segment, deque(maxlen=RESULTS_KEPT))
            kept.append((index, result, states))
            self.results.move_to_end(segment)
            while len(self.results) > SEGMENTS_KEPT:
                self.results.popitem(last=False)

    def kept_result(self, segment: str, index: int) -> tuple[Any, Any] | None:
        """Round `index`'s (result, states) in `segment`, if still kept."""
        with self.lock:
            for kept_index, result, states in self.results.get(segment, ()):
                if kept_index == index:
                    return result, states
        return None

    def architecture(self, spec: Any, build: Callable[[Any], Any]) -> Any:
        """This thread's module for `spec`, built by `build` the first time."""
        built = self.threads.__dict__.setdefault("architectures", {})
        if spec not in built:
            built[spec] = build(spec)
        return built[spec]

    def clear(self) -> None:
        """Forget the rounds and the segments' results."""
        with self.lock:
            self.rounds.clear()
            self.results.clear()


WORKER = WorkerState()
