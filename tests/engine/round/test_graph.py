"""The one round builder (graph.py): subtree sums that complete to the pairwise tree bit for
bit on any placement, and a chained graph with as few dependent steps as the round's math,
in each collective."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from dask_dane.bench.scaling.introspect import chained_rounds
from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.fedavg import FedAvg
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.algorithms.scaffold import Scaffold
from dask_dane.pipeline.engine.round.aggregate import (
    Partial,
    merge,
    node_sum,
    owned_nodes,
    tree_reduce,
    tree_root,
)
from dask_dane.pipeline.engine.round.comm import Layout, layout
from dask_dane.pipeline.engine.round.graph import ChainLink, build_round
from dask_dane.pipeline.engine.round.tasks import RoundInput
from dask_dane.pipeline.engine.round.worker import WorkerPhase, phase_total

SPEC = ModelSpec(name="small-cnn", sample_shape=(1, 8, 8), num_classes=10)
SOLVER = LocalSolver(local_steps=2, local_lr=0.1, batch_size=4)


def _partial(seed: int) -> Partial:
    """A shard's sum with values whose float32 additions round differently by order."""
    g = torch.Generator().manual_seed(seed)
    tensor = torch.randn(257, generator=g) * 10 ** torch.randint(-6, 6, (257,), generator=g)
    return Partial(
        tensor_sums={"v": tensor},
        metric_sums={"loss": float(torch.rand(1, generator=g)) * 1e3},
        num_samples=seed + 3,
        num_shards=1,
        compute_by_worker={},
        rows=seed,
        diagnostics={},
    )


def _placements() -> list[list[str]]:
    """Contiguous blocks as shard_placement makes them, and scattered ones after faults."""
    rng = random.Random(0)
    found = []
    for shards, workers in itertools.product(range(1, 10), range(1, 5)):
        names = [f"w{k}" for k in range(workers)]
        found.append([names[i * workers // shards] for i in range(shards)])
        found.append([rng.choice(names) for _ in range(shards)])
    return found


@pytest.mark.parametrize("placement", _placements(), ids=lambda p: "".join(w[1] for w in p))
def test_subtree_sums_complete_to_the_pairwise_tree_bit_for_bit(placement):
    leaves = [_partial(i) for i in range(len(placement))]
    expected = tree_reduce(leaves)

    outputs = []
    for worker in dict.fromkeys(placement):
        mine = {(0, i): p for i, p in enumerate(leaves) if placement[i] == worker}
        nodes = owned_nodes(placement, worker)
        # Every shard of the worker is under exactly one of its nodes, and no other's is.
        count = len(placement)
        covered = sorted(i for lvl, j in nodes for i in range(j << lvl, min((j + 1) << lvl, count)))
        assert covered == sorted(i for (_, i) in mine)
        outputs.append(WorkerPhase(nodes={n: node_sum(n, mine, len(placement)) for n in nodes}))
    weights = torch.zeros_like(expected.tensor_sums["v"])  # float32 transport: unused
    total = phase_total(outputs, len(placement), weights, "float32")

    assert torch.equal(total.tensor_sums["v"], expected.tensor_sums["v"])
    assert total.metric_sums == expected.metric_sums
    assert total.num_samples == expected.num_samples


def test_a_worker_holding_every_shard_sends_the_root_alone():
    assert owned_nodes(["a"] * 5, "a") == [tree_root(5)] == [(3, 0)]
    # Blocks of 4 and 4 on two workers: one node each, the root's two children.
    placement = ["a"] * 4 + ["b"] * 4
    assert owned_nodes(placement, "a") == [(2, 0)] and owned_nodes(placement, "b") == [(2, 1)]


def test_the_order_of_additions_matters_so_the_tree_is_the_oracle():
    # The check above would be empty if float32 addition were associative on these values.
    parts = [_partial(i) for i in range(3)]
    left = merge(merge(parts[0], parts[1]), parts[2]).tensor_sums["v"]
    right = merge(parts[0], merge(parts[1], parts[2])).tensor_sums["v"]
    assert not torch.equal(left, right)


def _chained(strategy, placement: list[str], token: str = "tok"):
    static = RoundInput(
        strategy=strategy, spec=SPEC, seed=0, index=3, layout=layout(placement),
        num_shards=len(placement),
    )  # fmt: skip
    carry = [f"carry{k}" for k in range(len(set(placement)))]  # stand-ins for futures
    shards = [f"shard{i}" for i in range(len(placement))]
    return build_round(
        static, shards=shards, placement=placement, link=ChainLink(carry=carry), token=token,
        evaluate=[f"piece{i}" for i in range(len(placement))],
    )  # fmt: skip


def _depth(graph, key: str) -> int:
    deps = dict(graph.dependencies)
    inside = [d for d in deps[key] if d in deps]
    return 1 + max((_depth(graph, d) for d in inside), default=0)


TWO = ["tcp://a:1"] * 4 + ["tcp://b:2"] * 4


def test_a_dane_round_is_three_dependent_steps_with_one_task_per_worker_and_phase():
    graph, keys = _chained(Dane(eta=1.0, mu=0.0, solver=SOLVER), TWO)

    names = set(graph.layers)
    assert {n for n in names if n.startswith("local_")} == {
        f"{phase}-3-{k}-tok" for phase in ("local_grad", "local_solve") for k in (0, 1)
    }
    # local gradients -> local solves -> the update, on each worker. A solve takes every
    # worker's sums of the gradients; its own shards' gradients wait on its worker (worker.py).
    assert [_depth(graph, key) for key in keys.updates] == [3, 3]
    assert not [n for n in graph.layers if n.startswith("nodes_")]
    assert graph.dependencies["local_solve-3-1-tok"] == {
        "local_grad-3-0-tok",
        "local_grad-3-1-tok",
    }
    assert graph.dependencies["update-3-0-tok"] == {
        "local_grad-3-0-tok",
        "local_grad-3-1-tok",
        "local_solve-3-0-tok",
        "local_solve-3-1-tok",
    }
    for k, worker in enumerate(("tcp://a:1", "tcp://b:2")):
        for name in ("local_grad", "local_solve", "update"):
            annotations = graph.layers[f"{name}-3-{k}-tok"].annotations
            assert annotations == {"workers": [worker], "allow_other_workers": True}
    # Each worker scores its own shards' pieces of the test split, from the round's update
    # made inline (ready with it, before the next round's tasks); the driver adds the sums.
    assert keys.evaluation == ["score-3-0-tok", "score-3-1-tok"]
    assert graph.dependencies["score-3-1-tok"] == graph.dependencies["update-3-1-tok"]
    assert graph.layers["score-3-1-tok"].annotations["workers"] == ["tcp://b:2"]


def test_a_round_the_driver_takes_no_weights_of_builds_its_figures_beside_the_update():
    static = RoundInput(
        strategy=FedAvg(solver=SOLVER), spec=SPEC, seed=0, index=3, layout=layout(TWO),
        num_shards=len(TWO),
    )  # fmt: skip
    graph, keys = build_round(
        static, shards=[f"shard{i}" for i in range(8)], placement=TWO,
        link=ChainLink(carry=["carry0", "carry1"]), token="tok", light=True,
    )  # fmt: skip
    assert keys.figures == "figures-3-0-tok" and keys.figures in keys.held()
    assert graph.dependencies[keys.figures] == graph.dependencies["update-3-0-tok"]
    assert keys.evaluation == []


def test_a_fedavg_round_is_two_dependent_steps():
    graph, keys = _chained(FedAvg(solver=SOLVER), TWO)

    assert not [n for n in graph.layers if n.startswith("nodes_")]
    assert [_depth(graph, key) for key in keys.updates] == [2, 2]


def _three_rounds(strategy, placement: list[str]):
    """Three rounds chained as the driver chains them (bench's own walk, on these statics)."""

    def static_of(t: int) -> RoundInput:
        return RoundInput(
            strategy=strategy, spec=SPEC, seed=0, index=t, num_shards=len(placement),
            layout=layout(placement),
        )  # fmt: skip

    return chained_rounds(static_of, placement, rounds=3, token="tok")


def _chain_depth(deps: dict, key: str) -> int:
    return 1 + max((_chain_depth(deps, d) for d in deps[key]), default=0)


@pytest.mark.parametrize(
    "strategy, placement, steps",
    [
        (Dane(eta=1.0, mu=0.0, solver=SOLVER), TWO, 2),  # local gradients, local solves
        (Dane(eta=1.0, mu=0.0, solver=SOLVER), TWO[:4], 2),
        (FedAvg(solver=SOLVER), TWO, 1),  # local training, each round's update inline
        (Scaffold(solver=SOLVER), TWO, 2),  # local training, its sums split off the states
    ],
    ids=["dane-2", "dane-1", "fedavg-2", "scaffold-2"],
)
def test_a_round_starts_with_the_update_before_it_made_inline(strategy, placement, steps):
    deps, rounds, tasks = _three_rounds(strategy, placement)

    depths = [_chain_depth(deps, keys.updates[0]) for keys in rounds]
    assert depths[2] - depths[1] == depths[1] - depths[0] == steps
    # Round 2's first task on worker 1 runs round 1's update itself, from the same inputs as
    # round 1's update task; the update task's result is taken by the later phases and the
    # driver, off the chain.
    last = len(set(placement)) - 1
    first = f"{strategy.phases[0]}-2-{last}-tok"
    update = f"update-1-{last}-tok"
    assert update not in deps[first] and deps[update] <= deps[first]
    assert tasks[first][5] == tasks[update]  # the carry argument: the update task itself


def test_one_worker_splits_nothing_off_and_shard_states_stay_with_their_worker():
    graph, keys = _chained(Dane(eta=1.0, mu=0.0, solver=SOLVER), ["tcp://a:1"] * 4)
    assert [_depth(graph, key) for key in keys.updates] == [3]

    # SCAFFOLD keeps a state per shard: its output is split, so the others take only sums,
    # and the next round on each worker takes its own output (the states) where it is.
    graph, keys = _chained(Scaffold(solver=SOLVER), TWO)
    assert keys.states == ["local_train-3-0-tok", "local_train-3-1-tok"]
    assert graph.dependencies["update-3-1-tok"] == {
        "nodes_local_train-3-0-tok",
        "nodes_local_train-3-1-tok",
    }
    assert keys.link({}).before == keys.states


def test_a_round_counts_each_workers_subtree_sums_to_every_other_worker():
    graph, _ = _chained(FedAvg(solver=SOLVER), TWO)
    # Only the phases, the updates and the scores: no task finishes a phase apart.
    assert {key.split("-")[0] for key in graph.layers} == {"local_train", "update", "score"}

    # Two workers of four shards each: one subtree sum each, sent to the other.
    assert layout(TWO) == Layout(partials_moved=2)
    assert layout(TWO[:4]) == Layout(partials_moved=0)
