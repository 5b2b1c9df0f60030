"""What a torch.distributed group's all-gather costs on the benchmark's own cluster: the floor
under a `--collective torch` round, measured in the same run as its rounds and Dask's hop.

Built as the engine builds a segment's group (pipeline/engine/run/segment.py: form_group), one task
per worker, then timed four ways: the raw all-gather of a uint8 tensor of the payload's bytes
(the network's and gloo's share), the engine's all-gather of that tensor as an object
(round/group.py: packed with its frames, one slot a rank, unpacked), gloo's own all-reduce
of the same bytes as float32 (the floor a sum can reach) and the engine's exchange of a
phase's sums of those bytes (round/exchange.py: what a round pays, bit for bit).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import torch
from distributed import get_worker
from distributed.comm import get_address_host

from ...pipeline.engine.round.aggregate import Partial
from ...pipeline.engine.round.exchange import exchange_phase
from ...pipeline.engine.round.group import GroupSpec
from ...pipeline.engine.round.worker import phase_total
from ...pipeline.engine.run.bounded import cluster_identity
from ...pipeline.engine.run.segment import form_group


def gloo_allgather_ms(client: Any, payload_bytes: int, repeats: int = 30) -> dict[str, Any]:
    """Medians, in ms, over `repeats` all-gathers of `payload_bytes` on every worker at once
    (rank 0's timings): `raw_ms` and `objects_ms` (the module docstring)."""
    workers = sorted(cluster_identity(client)["workers"])
    spec = GroupSpec(name=f"bench-{uuid.uuid4().hex[:8]}", world=len(workers), timeout_s=60.0)
    futures = [
        client.submit(
            _rank, spec, rank, payload_bytes, repeats, key=f"gloo-{rank}-{spec.name}",
            workers=[worker], pure=False,
        )
        for rank, worker in enumerate(workers)
    ]  # fmt: skip
    times = client.gather(futures)[0]
    return {
        "workers": len(workers),
        "payload_bytes": payload_bytes,
        **{f"{name}_ms": statistics.median(values) for name, values in times.items()},
    }


def _timed(call: Any, into: list[float]) -> Any:
    started = time.perf_counter()
    value = call()
    into.append((time.perf_counter() - started) * 1e3)
    return value


def _phase_sums(rank: int, payload_bytes: int) -> dict[Any, Partial]:
    """One shard's sums of a phase of float32 weights of the payload's bytes, rank r's."""
    weights = torch.full((max(payload_bytes // 4, 1),), float(rank + 1))
    partial = Partial(tensor_sums={"weights": weights}, metric_sums={}, num_samples=1,
                      num_shards=1, compute_by_worker={}, rows=0, diagnostics={})  # fmt: skip
    return {(0, rank): partial}


def _rank(spec: GroupSpec, rank: int, payload_bytes: int, repeats: int) -> dict[str, list[float]]:
    group = form_group(spec, rank, get_address_host(get_worker().address))
    payload = torch.full((payload_bytes,), rank, dtype=torch.uint8)
    sums = _phase_sums(rank, payload_bytes)
    summed = torch.zeros(max(payload_bytes // 4, 1))
    times: dict[str, list[float]] = {"raw": [], "objects": [], "allreduce": [], "exchange": []}
    try:
        for _ in range(repeats + 1):  # the first of each, the connections' warm-up, left out
            gathered = _timed(lambda: group.allgather_tensor(payload), times["raw"])
            values = _timed(lambda: group.allgather(payload, tag="bench"), times["objects"])
            _timed(lambda: group.allreduce_tensor(summed), times["allreduce"])
            exchanged = _timed(lambda: exchange_phase(
                group, sums, count=spec.world, encoding="float32", flag=False, own_seconds=0.0,
                tag="bench",
            ), times["exchange"])  # fmt: skip
        expected = [torch.full_like(payload, r) for r in range(spec.world)]
        assert torch.equal(gathered, torch.cat(expected))  # the bytes arrived as sent
        assert all(torch.equal(v, e) for v, e in zip(values, expected, strict=True))
        total = phase_total(exchanged[0], spec.world, sums[(0, rank)].tensor_sums["weights"],
                            "float32")  # fmt: skip
        assert float(total.tensor_sums["weights"][0]) == spec.world * (spec.world + 1) / 2
        return {name: values[1:] for name, values in times.items()}
    finally:
        group.close()
