"""The round graph's shape: task names, pinning, one reduction tree per phase."""

from __future__ import annotations

from dataclasses import replace

from dask.utils import key_split

from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.sgd import Sgd
from dask_dane.pipeline.round.comm import layout
from dask_dane.pipeline.round.graph import RoundPlan, build_round, placeholder_plan
from dask_dane.pipeline.round.tasks import RoundInput

SPEC = ModelSpec(name="small-cnn", sample_shape=(1, 8, 8), num_classes=10)
SOLVER = LocalSolver(local_steps=2, local_lr=0.1, batch_size=4)


def _plan(strategy, num_shards: int = 4) -> RoundPlan:
    # Strings stand in for futures: building a graph computes nothing.
    placement = [f"tcp://127.0.0.1:{1000 + i % 2}" for i in range(num_shards)]
    round_input = RoundInput(
        strategy=strategy, spec=SPEC, seed=0, index=3, layout=layout(placement)
    )
    return placeholder_plan(round_input, placement, token="ab12cd34")


def test_dane_round_names_tasks_by_phase_round_and_shard():
    graph, keys = build_round(_plan(Dane(eta=1.0, mu=0.0, solver=SOLVER)))

    names = set(graph.layers)
    for i in range(4):
        assert f"local_grad-3-{i}-ab12cd34" in names
        assert f"local_solve-3-{i}-ab12cd34" in names
    assert keys.result == "update-3-ab12cd34"
    assert key_split("local_grad-3-1-ab12cd34") == "local_grad"  # how the dashboard groups
    # 4 shards reduce in a tree of 2 + 1 combine tasks per phase.
    assert sum(name.startswith("reduce_local_grad-3-") for name in names) == 3
    assert sum(name.startswith("reduce_local_solve-3-") for name in names) == 3


def test_each_workers_shards_are_summed_by_one_task_there():
    # 8 shards in blocks of 4 on 2 workers: one local sum per worker, one merge across.
    plan = _plan(Dane(eta=1.0, mu=0.0, solver=SOLVER), num_shards=8)
    workers = ["tcp://127.0.0.1:1000"] * 4 + ["tcp://127.0.0.1:1001"] * 4
    graph, _ = build_round(replace(plan, data=replace(plan.data, placement=workers)))

    reduce = sorted(n for n in graph.layers if n.startswith("reduce_local_grad-3-"))
    assert len(reduce) == 3
    local_sums = [n for n in reduce if "-local-" in n]
    assert {frozenset(graph.dependencies[n]) for n in local_sums} == {
        frozenset(f"local_grad-3-{i}-ab12cd34" for i in range(4)),
        frozenset(f"local_grad-3-{i}-ab12cd34" for i in range(4, 8)),
    }
    for name in local_sums:
        first = min(graph.dependencies[name])
        assert graph.layers[name].annotations["workers"] == [workers[int(first.split("-")[2])]]
    (root,) = set(reduce) - set(local_sums)
    assert graph.dependencies[root] == set(local_sums)
    assert graph.layers[root].annotations["workers"] == [workers[0]]


def test_local_tasks_are_pinned_to_their_shard_worker():
    graph, _ = build_round(_plan(Dane(eta=1.0, mu=0.0, solver=SOLVER)))

    for i in range(4):
        annotations = graph.layers[f"local_solve-3-{i}-ab12cd34"].annotations
        assert annotations["workers"] == [f"tcp://127.0.0.1:{1000 + i % 2}"]
        assert annotations["allow_other_workers"] is True  # lost workers: rerun elsewhere


def test_second_phase_depends_on_the_broadcast_and_its_own_first_phase_output():
    graph, _ = build_round(_plan(Dane(eta=1.0, mu=0.0, solver=SOLVER)))

    deps = graph.dependencies["local_solve-3-2-ab12cd34"]
    assert deps == {"broadcast_local_grad-3-ab12cd34", "local_grad-3-2-ab12cd34"}
    # The broadcast is made from the phase's sum directly.
    (total,) = graph.dependencies["broadcast_local_grad-3-ab12cd34"]
    assert total.startswith("reduce_local_grad-3-")


def test_each_phase_is_finished_once_and_the_update_takes_it_from_there():
    # One path per round: the gradient phase is averaged and broadcast by one task, whose
    # output both the solves and the update take; the update finishes the last phase from
    # its sum, one hop after it. No finish task per phase.
    graph, keys = build_round(_plan(Dane(eta=1.0, mu=0.0, solver=SOLVER)))

    assert not [name for name in graph.layers if name.startswith("finish_")]
    inputs = graph.dependencies[keys.result]
    assert len(inputs) == 2
    assert {key_split(k) for k in inputs} == {"broadcast_local_grad", "reduce_local_solve"}
    assert "broadcast_local_grad-3-ab12cd34" in graph.dependencies["local_solve-3-0-ab12cd34"]
    assert graph.layers[keys.result].annotations["workers"] == ["tcp://127.0.0.1:1000"]


def test_single_phase_strategy_has_no_second_phase():
    graph, keys = build_round(_plan(Sgd(local_lr=0.1, batch_size=4), num_shards=1))

    local = [name for name in graph.layers if name.startswith("local_")]
    assert local == ["local_grad-3-0-ab12cd34"]
    assert keys.evaluation == "evaluate-3-ab12cd34"


def _tree_plan(workers: int, broadcast: str) -> RoundPlan:
    placement = [f"tcp://127.0.0.1:{1000 + i}" for i in range(workers)]
    plan = _plan(Dane(eta=1.0, mu=0.0, solver=SOLVER), num_shards=workers)
    return replace(plan, data=replace(plan.data, placement=placement), broadcast=broadcast)


def _source_of(graph, key: str) -> str:
    """The relay or root input a relay task copies from (its markers only order it)."""
    (parent,) = {d for d in graph.dependencies[key] if "_done" not in d} or {"root"}
    return parent


def test_a_tree_broadcast_relays_each_phase_input_by_doubling_the_holders():
    # 8 workers: worker k copies from k - 2^floor(log2 k), so 3 levels instead of 7 copies
    # in a row from the root; every worker's tasks take their own worker's copy.
    graph, _ = build_round(_tree_plan(8, "tree"))

    relays = sorted(n for n in graph.layers if key_split(n) == "relay_local_solve")
    assert len(relays) == 7

    # One level at a time: level 2 (workers 2, 3) waits for worker 1's marker, level 3
    # (workers 4-7) for workers 2's and 3's, so the root serves one child a level.
    def markers(k: int) -> set:
        return {d for d in graph.dependencies[f"relay_local_solve-3-{k}-ab12cd34"] if "_done" in d}

    assert markers(1) == set()
    assert markers(2) == markers(3) == {"relay_local_solve_done-3-1-ab12cd34"}
    assert markers(4) == {f"relay_local_solve_done-3-{k}-ab12cd34" for k in (2, 3)}
    assert not [n for n in graph.layers if n.startswith("relay_local_solve_done-3-4-")]
    parents = {k: _source_of(graph, f"relay_local_solve-3-{k}-ab12cd34") for k in range(1, 8)}
    assert parents[1] == parents[2] == parents[4] == "broadcast_local_grad-3-ab12cd34"
    assert parents[3] == parents[5] == "relay_local_solve-3-1-ab12cd34"
    assert parents[6] == "relay_local_solve-3-2-ab12cd34"
    assert parents[7] == "relay_local_solve-3-3-ab12cd34"
    for k in range(1, 8):
        worker = [f"tcp://127.0.0.1:{1000 + k}"]
        assert graph.layers[f"relay_local_solve-3-{k}-ab12cd34"].annotations["workers"] == worker
        deps = graph.dependencies[f"local_solve-3-{k}-ab12cd34"]
        assert f"relay_local_solve-3-{k}-ab12cd34" in deps
        assert "broadcast_local_grad-3-ab12cd34" not in deps
        assert f"relay_weights-3-{k}-ab12cd34" in deps
    # The root's own tasks take the input where it was made.
    assert "broadcast_local_grad-3-ab12cd34" in graph.dependencies["local_solve-3-0-ab12cd34"]


def test_auto_uses_the_tree_from_eight_workers_and_direct_sends_below():
    cases = [(4, "auto", 0), (8, "auto", 7), (4, "tree", 3), (8, "direct", 0)]
    for workers, broadcast, relays in cases:
        graph, _ = build_round(_tree_plan(workers, broadcast))
        found = [n for n in graph.layers if key_split(n) in ("relay_weights", "relay_local_solve")]
        assert len(found) == relays * 2, (workers, broadcast)  # weights and the broadcast
