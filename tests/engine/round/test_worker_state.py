"""The one holder of what a worker keeps between tasks (round/worker_state.py): each part
evicted as its docstring says, and nothing else in the engine keeping module-level state."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from dask_dane.pipeline.engine.round import worker_state
from dask_dane.pipeline.engine.round.worker_state import (
    CHAINS_KEPT,
    RESULTS_KEPT,
    ROUNDS_KEPT,
    SEGMENTS_KEPT,
    WorkerState,
)

ENGINE = Path(worker_state.__file__).resolve().parents[1]
PACKAGE = ENGINE.parents[1]


def test_rounds_keep_the_latest_chains_and_their_latest_rounds():
    held = WorkerState()
    made = []

    def fresh() -> list:
        made.append([])
        return made[-1]

    for chain in ("a", "b", "c"):
        for index in (1, 2, 3):
            held.round_record(chain, index, fresh)
    assert list(held.rounds) == ["b", "c"][-CHAINS_KEPT:]
    assert all(sorted(rounds) == [2, 3][-ROUNDS_KEPT:] for rounds in held.rounds.values())
    # A chain used again moves to the most recent; its kept record is the same object.
    record = held.round_record("b", 3, fresh)
    assert record is held.rounds["b"][3] and list(held.rounds) == ["c", "b"]
    assert len(made) == 9  # made once per (chain, round), never again while kept


def test_segment_results_keep_the_last_rounds_of_the_last_segments():
    held = WorkerState()
    for segment in ("s1", "s2", "s3"):
        for index in range(1, 6):
            held.keep_result(segment, index, f"{segment}-{index}", {index: "state"})
    assert list(held.results) == ["s2", "s3"][-SEGMENTS_KEPT:]
    assert held.kept_result("s3", 5) == ("s3-5", {5: "state"})
    assert held.kept_result("s3", 5 - RESULTS_KEPT + 1) is not None
    assert held.kept_result("s3", 5 - RESULTS_KEPT) is None  # evicted
    assert held.kept_result("s1", 5) is None
    held.clear()
    assert not held.rounds and not held.results


def test_each_thread_builds_its_own_architecture_once():
    held, built = WorkerState(), []

    def build(spec: str) -> object:
        built.append(spec)
        return object()

    here = held.architecture("cnn", build)
    assert held.architecture("cnn", build) is here
    there = []
    thread = threading.Thread(target=lambda: there.append(held.architecture("cnn", build)))
    thread.start()
    thread.join()
    assert there[0] is not here and built == ["cnn", "cnn"]


def _module_level_mutables(path: Path) -> list[str]:
    """Names bound at module level to a mutable container or a thread-local."""
    mutable_calls = {"dict", "list", "set", "OrderedDict", "deque", "local", "defaultdict",
                     "WeakKeyDictionary", "WeakValueDictionary"}  # fmt: skip
    found = []
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AnnAssign) and node.value else []
        )  # fmt: skip
        value = getattr(node, "value", None)
        call = value.func if isinstance(value, ast.Call) else None
        called = getattr(call, "attr", None) or getattr(call, "id", None)
        if isinstance(value, ast.Dict | ast.List | ast.Set) or called in mutable_calls:
            found += [f"{path.name}:{t.id}" for t in targets if isinstance(t, ast.Name)]
    return found


def test_no_module_a_worker_runs_but_the_holder_keeps_mutable_state():
    # A module-level container is a constant (an UPPER_CASE table, never written) or the
    # holder's; a cache under any other name (_chains, _PER_ROW) is state outside it. The
    # worker runs the engine, the models and the data readers.
    found = [
        name
        for root in (ENGINE, PACKAGE / "models", PACKAGE / "datasets")
        for path in sorted(root.rglob("*.py"))
        if path.name != "worker_state.py"
        for name in _module_level_mutables(path)
        if not name.endswith("__")
        and (not name.split(":")[1].isupper() or name.split(":")[1].startswith("_"))
    ]
    assert found == [], found
