"""How a phase's sums cross the gloo group (pipeline/engine/round/exchange.py, flat_sums.py):
every form gives the pairwise tree's root bit for bit, checked against aggregate.tree_reduce
on real gloo groups of 1, 2 and 3 processes on loopback, above and below the size where the
reduce-scatter takes over; the buffers a segment passes its sums through are allocated
once. The group runs on the sums' device: these CPU runs are the path NCCL takes on GPUs."""

from __future__ import annotations

import copy
import queue
import threading

import pytest
import torch

from dask_dane.pipeline.engine.protocol import LocalOutput
from dask_dane.pipeline.engine.round import exchange, transport
from dask_dane.pipeline.engine.round.aggregate import (
    Partial,
    node_sum,
    owned_nodes,
    sendable,
    shard_leaf,
    shard_placement,
    tree_reduce,
)
from dask_dane.pipeline.engine.round.flat_sums import flat_layout, header_of, restored, write_flat
from dask_dane.pipeline.engine.round.group import Group, GroupSpec
from dask_dane.pipeline.engine.round.shards import to_device
from dask_dane.pipeline.engine.round.worker import WorkerPhase, phase_total


def _report(shard: int, size: int, dtype=torch.float64) -> Partial:
    """A shard's output with tensors of awkward sizes (segments off a boundary), a floating
    and a counter buffer, and metrics: each value seeded by the shard."""
    gen = torch.Generator().manual_seed(shard)
    tensors = {
        "weights": torch.randn(size, generator=gen, dtype=dtype),
        "grad": torch.randn(3, 7, generator=gen, dtype=dtype),
    }
    buffers = {
        "bn.mean": torch.randn(5, generator=gen, dtype=dtype),
        "bn.count": torch.tensor(shard + 3),
    }
    output = LocalOutput(tensors=tensors, metrics={"loss": 0.1 * shard + 1 / 3}, rows=10)
    return shard_leaf(output=output, num_samples=17 + shard, compute_s=0.01, worker=f"w{shard}",
                       shard=shard, buffers=buffers)  # fmt: skip


def _assert_same(a, b) -> None:
    assert a.tensor_sums.keys() == b.tensor_sums.keys()
    for k in a.tensor_sums:
        assert torch.equal(a.tensor_sums[k], b.tensor_sums[k]), k
    assert a.buffer_sums.keys() == b.buffer_sums.keys()
    for k in a.buffer_sums:
        assert torch.equal(a.buffer_sums[k], b.buffer_sums[k]), k
    assert a.metric_sums == b.metric_sums
    assert (a.num_samples, a.num_shards, a.rows) == (b.num_samples, b.num_shards, b.rows)


def test_a_partial_survives_its_flat_form_and_its_segments_start_on_a_boundary():
    partial = sendable(_report(0, 1001))
    layout = flat_layout(partial)
    flat = torch.empty(layout.size, dtype=layout.dtype)
    write_flat(partial, layout, flat)
    back = restored(header_of(partial), layout, flat)
    _assert_same(back, partial)
    assert all(t.data_ptr() % 64 == 0 for t in back.tensor_sums.values())
    assert all(b.data_ptr() % 64 == 0 for b in back.buffer_sums.values() if b.is_floating_point())


def test_partials_of_mixed_dtypes_have_no_flat_form():
    partial = sendable(_report(0, 9))
    mixed = {**partial.tensor_sums, "half": torch.zeros(2, dtype=torch.float32)}
    assert flat_layout(type(partial)(**{**partial.__dict__, "tensor_sums": mixed})) is None


def _sums(placement: list[str], worker: str, t: int, size: int, encoding: str) -> dict:
    """A worker's subtree sums of round t as they travel (encoded as transport.py does)."""
    shards = len(placement)
    leaves = {(0, i): sendable(_report(i + t, size)) for i in range(shards)}
    weights = torch.linspace(-1, 1, size, dtype=torch.float64)
    return {
        n: transport.encode(node_sum(n, leaves, shards), weights, encoding)
        for n in owned_nodes(placement, worker)
    }


def _rank(rank: int, world: int, ports, case: tuple, out, device: str = "cpu") -> None:
    """One rank: its shards' reports summed over its nodes, every phase exchanged over
    `rounds` rounds; sends back each round's root and its scratch buffers' addresses."""
    shards, size, rounds, encoding = case
    spec = GroupSpec(name="t", world=world, timeout_s=30.0)
    if rank == 0:
        group, address = Group.hosting(spec, "127.0.0.1")
        for _ in range(world - 1):
            ports.put(address[1])
        group.join("127.0.0.1")
    else:
        group = Group(spec, rank, "127.0.0.1", ("127.0.0.1", ports.get(timeout=60)))
    on = torch.device(device if device == "cpu" else f"cuda:{rank}")
    group.on_devices(on)  # gloo alone on CPUs; a NCCL group beside it where all are GPUs
    placement = shard_placement(shards, [f"w{r}" for r in range(world)])
    weights = torch.linspace(-1, 1, size, dtype=torch.float64)
    roots, addresses = [], []
    for t in range(rounds):
        sums = to_device(_sums(placement, f"w{rank}", t, size, encoding), on)
        received, flagged = exchange.exchange_phase(
            group, sums, count=shards, encoding=encoding, flag=rank == 1 and t == 1,
            own_seconds=0.0, tag="phase-0",
        )  # fmt: skip
        total = phase_total(received, shards, weights, encoding)
        roots.append((copy.deepcopy(total), flagged))  # its tensors: the next round's buffer
        addresses.append(sorted(b.data_ptr() for b in group._scratch.values()))
    group.close()
    out.put((rank, roots, addresses))


def _run(world: int, case: tuple, device: str = "cpu") -> dict:
    """Every rank in a thread of its own (gloo releases the GIL while it waits)."""
    ports, out = queue.Queue(), queue.Queue()
    ranks = [
        threading.Thread(target=_rank, args=(r, world, ports, case, out, device), daemon=True)
        for r in range(world)
    ]
    for thread in ranks:
        thread.start()
    results = {}
    for _ in ranks:
        rank, roots, addresses = out.get(timeout=120)
        results[rank] = (roots, addresses)
    for thread in ranks:
        thread.join(timeout=30)
    return results


@pytest.mark.parametrize(
    ("world", "shards", "size"),
    [(1, 3, 70_000), (2, 4, 100), (2, 8, 70_000), (3, 8, 70_001), (3, 5, 50)],
)
@pytest.mark.parametrize("encoding", ["float32", "bfloat16"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_rank_gets_the_trees_root_bit_for_bit(world, shards, size, encoding, device):
    # 70,000 float64 weights (560 kB) take the reduce-scatter, 100 the flat all-gather; a
    # lossy transport sends the sums as they are. 3 ranks on 8 shards: rank 0 holds two
    # nodes; 3 on 5: uneven chunks. Rank 1 flags round 1: every rank reads it, then only then.
    # On GPUs (one a rank): the sums stay there, NCCL moves them, the root ends on the CPU
    # with the CPU's bits (the GPU check: presets/scripts/gpu-check.sh runs these).
    if device == "cuda" and torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA device(s)")
    rounds = 3
    results = _run(world, (shards, size, rounds, encoding), device)
    placement = shard_placement(shards, [f"w{r}" for r in range(world)])
    weights = torch.linspace(-1, 1, size, dtype=torch.float64)
    for t in range(rounds):
        every = [WorkerPhase(nodes=_sums(placement, f"w{r}", t, size, encoding))
                 for r in range(world)]  # fmt: skip
        expected = phase_total(every, shards, weights, encoding)
        if encoding == "float32":
            assert_same = tree_reduce([sendable(_report(i + t, size)) for i in range(shards)])
            _assert_same(expected, assert_same)
        for rank in range(world):
            root, flagged = results[rank][0][t]
            _assert_same(root, expected)
            assert flagged == (world > 1 and t == 1)
    for rank in range(world):  # the same buffers every round: nothing grows in a segment
        addresses = results[rank][1]
        assert addresses[1:] == addresses[:-1]


def test_a_cpu_group_keeps_to_gloo_and_carries_cpu_tensors():
    results = {}

    def rank(r, ports):
        spec = GroupSpec(name="c", world=2, timeout_s=30.0)
        if r == 0:
            group, address = Group.hosting(spec, "127.0.0.1")
            ports.put(address[1])
            group.join("127.0.0.1")
        else:
            group = Group(spec, r, "127.0.0.1", ("127.0.0.1", ports.get(timeout=60)))
        group.on_devices(torch.device("cpu"))
        results[r] = ("_device_group" in group.__dict__, group.carries(torch.zeros(1)))
        group.close()

    ports = queue.Queue()
    threads = [threading.Thread(target=rank, args=(r, ports), daemon=True) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {0: (False, True), 1: (False, True)}
