"""The communication accounting (pipeline/engine/round/comm.py) and the averaging
(pipeline/engine/round/aggregate.py), fast and against counts made by hand: no cluster, so the
development loop and mutation testing (`make mutation`) exercise them. The Dask runs' own
byte checks are in test_algorithm_options.py and test_dask_vs_reference.py (cluster tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from dask_dane.pipeline.engine.protocol import LocalOutput
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round import comm
from dask_dane.pipeline.engine.round.aggregate import (
    Partial,
    mean_of,
    merge,
    sendable,
    shard_leaf,
    shard_placement,
    tree_levels,
    tree_reduce,
)
from dask_dane.pipeline.engine.round.transport import round_form
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.setup.settings import read_broadcast


def test_payload_bytes_count_every_element_at_its_width():
    tensors = {"a": torch.zeros(10, dtype=torch.float32), "b": torch.zeros(3, dtype=torch.float64)}
    assert comm.payload_bytes(tensors) == 10 * 4 + 3 * 8
    assert comm.payload_bytes({}) == 0


def test_a_former_broadcast_value_reads_as_auto_with_a_note_and_a_current_one_as_it_is():
    # reduce, and the per-round form's direct and tree, as older config files hold them.
    for former in ("reduce", "direct", "tree"):
        value, note = read_broadcast(former)
        assert value == "auto"
        assert note is not None and "all-gather" in note and "bit for bit" in note
    assert read_broadcast("allgather") == ("allgather", None)
    assert read_broadcast("auto") == ("auto", None)
    assert read_broadcast("gossip") == ("gossip", None)  # left to the settings' check


def test_the_round_form_a_row_names_is_the_all_gather_or_the_torch_group():
    assert round_form("dask") == round_form("auto") == "dask"
    assert round_form("torch") == "torch"


@dataclass
class _State:
    velocity: torch.Tensor
    note: str = "not a tensor"


def test_payload_and_driver_bytes_find_every_tensor_in_a_value():
    w = torch.zeros(5, dtype=torch.float64)  # 40 bytes
    state = _State(velocity=torch.zeros(5, dtype=torch.float32))  # 20 bytes
    shards = [{"tilt": torch.zeros(2, dtype=torch.float64)}, (torch.zeros(1),)]  # 16 + 4
    assert comm.payload_bytes(state) == 20
    assert comm.payload_bytes(shards) == 20
    assert comm.payload_bytes(None) == 0 and comm.payload_bytes(_State) == 0
    # The driver's fetch of a round's result: the weights, the state and the shard states.
    assert comm.driver_bytes(w, state, shards) == 40 + 20 + 20
    assert comm.driver_bytes(w, None, None) == 40


def _report(shard: int, n: int, values: list[float], worker: str) -> Partial:
    output = LocalOutput(
        tensors={"w": torch.tensor(values, dtype=torch.float64)},
        metrics={"loss": float(shard + 1)},
        rows=10 * n,
        diagnostics={"step": float(shard)},
    )
    return shard_leaf(output=output, num_samples=n, compute_s=0.5 + shard, worker=worker,
                       shard=shard)  # fmt: skip


def test_the_tree_average_is_the_sample_weighted_mean_with_its_accounting():
    sizes = [3, 1, 4, 2, 5]
    values = [[1.0, -2.0], [4.0, 0.5], [0.0, 3.0], [-1.0, 1.0], [2.0, 2.0]]
    workers = ["a", "b", "a", "b", "a"]
    reports = [
        _report(i, n, v, w) for i, (n, v, w) in enumerate(zip(sizes, values, workers, strict=True))
    ]

    total = tree_reduce([sendable(r) for r in reports])
    mean = mean_of(total)

    expected = np.average(np.array(values), axis=0, weights=sizes)
    np.testing.assert_allclose(mean.tensors["w"].numpy(), expected, rtol=1e-15)
    assert mean.metrics["loss"] == pytest.approx(np.average([1, 2, 3, 4, 5], weights=sizes))
    assert (total.num_samples, total.num_shards, total.rows) == (15, 5, 150)
    assert total.compute_by_worker == pytest.approx({"a": 0.5 + 2.5 + 4.5, "b": 1.5 + 3.5})
    assert total.diagnostics == {i: {"step": float(i)} for i in range(5)}
    # The order is the pairwise tree's: ((0+1)+(2+3))+4.
    by_hand = merge(
        merge(merge(sendable(reports[0]), sendable(reports[1])),
              merge(sendable(reports[2]), sendable(reports[3]))),
        sendable(reports[4]),
    )  # fmt: skip
    assert torch.equal(by_hand.tensor_sums["w"], total.tensor_sums["w"])


def test_groups_and_placement_as_documented():
    assert [tree_levels(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    assert shard_placement(4, ["x", "y"]) == ["x", "x", "y", "y"]
    assert shard_placement(3, ["x", "y"]) == ["x", "x", "y"]  # shard i on worker i*W//m
    assert shard_placement(2, ["x", "y", "z"]) == ["x", "y"]


# Model-sized copies a round, 4 shards on 2 workers (blocks: one subtree sum a worker): no
# input moves; each worker sends its one subtree sum to the other in each phase (2 a phase):
# DANE 4, FedAvg 2.
COPIES = {("dane", "auto"): 4, ("fedavg", "auto"): 2, ("dane", "allgather"): 4}


@pytest.mark.parametrize(("algorithm", "broadcast"), COPIES)
def test_the_reference_counts_the_copies_an_algorithm_moves(algorithm, broadcast, digits_stores):
    config = RunConfig(
        store=str(digits_stores[4]), model="small-cnn", dtype="float64", rounds=2,
        local_steps=2, batch_size=16, seed=3, algorithm=algorithm, broadcast=broadcast,
    ).validate()  # fmt: skip
    setup = prepare_run(config)
    model_bytes = initial_weights(setup.spec, 0).numel() * 8
    copies = COPIES[algorithm, broadcast]

    rows = run_reference(setup, rounds=2, num_workers=2).history

    assert [r["comm_bytes"] for r in rows] == [copies * model_bytes] * 2
    assert [r["cum_comm_bytes"] for r in rows] == [c * copies * model_bytes
                                                   for c in (1, 2)]  # fmt: skip
    assert [r["driver_bytes"] for r in rows] == [model_bytes] * 2  # no driver state


@pytest.mark.parametrize(
    ("placement", "sent"),
    [
        (["a", "a", "b", "b"], 2),  # one subtree each, to the one other worker
        (["a", "a", "a", "b"], 3),  # a: (1, 0) and (0, 2); b: (0, 3)
        (["a", "b", "c"], 6),  # one leaf each, to two others
        (["a"] * 8, 0),  # one worker sends nothing
    ],
)
def test_allgather_sends_each_subtree_sum_to_every_other_worker(placement, sent):
    gathered = comm.layout(placement)

    assert gathered.partials_moved == sent
    # No input moves, in any phase: each worker starts from its own copy of the update.
    assert comm.phase_bytes(outgoing=10, layout=gathered) == 10 * sent
