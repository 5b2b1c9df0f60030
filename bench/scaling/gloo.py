"""What a torch.distributed group's all-gather costs on the benchmark's own cluster: the floor
under a `--collective torch` round, measured in the same run as its rounds and Dask's hop.

Built as the engine builds a segment's group (pipeline/engine/run/segment.py: form_group), one task
per worker, then timed two ways: the raw all-gather of a uint8 tensor of the payload's bytes
(the network's and gloo's share), and the engine's all-gather of that tensor as an object
(round/group.py: packed with its frames, one slot a rank, unpacked: what a round pays).
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import torch
from distributed import get_worker
from distributed.comm import get_address_host

from ...pipeline.engine.round.group import GroupSpec
from ...pipeline.engine.run.segment import form_group


def gloo_allgather_ms(client: Any, payload_bytes: int, repeats: int = 30) -> dict[str, Any]:
    """Medians, in ms, over `repeats` all-gathers of `payload_bytes` on every worker at once
    (rank 0's timings): `raw_ms` and `objects_ms` (the module docstring)."""
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    spec = GroupSpec(name=f"bench-{uuid.uuid4().hex[:8]}", world=len(workers), timeout_s=60.0)
    futures = [
        client.submit(
            _rank, spec, rank, payload_bytes, repeats, key=f"gloo-{rank}-{spec.name}",
            workers=[worker], pure=False,
        )
        for rank, worker in enumerate(workers)
    ]  # fmt: skip
    raw, objects = client.gather(futures)[0]
    return {
        "workers": len(workers),
        "payload_bytes": payload_bytes,
        "raw_ms": statistics.median(raw),
        "objects_ms": statistics.median(objects),
    }


def _rank(
    spec: GroupSpec, rank: int, payload_bytes: int, repeats: int
) -> tuple[list[float], list[float]]:
    group = form_group(spec, rank, get_address_host(get_worker().address))
    payload = torch.full((payload_bytes,), rank, dtype=torch.uint8)
    try:
        raw, objects = [], []
        for _ in range(repeats + 1):  # the first of each, the connections' warm-up, left out
            started = time.perf_counter()
            gathered = group.allgather_tensor(payload)
            raw.append((time.perf_counter() - started) * 1e3)
            started = time.perf_counter()
            values = group.allgather(payload, tag="bench")
            objects.append((time.perf_counter() - started) * 1e3)
        expected = [torch.full_like(payload, r) for r in range(spec.world)]
        assert torch.equal(gathered, torch.cat(expected))  # the bytes arrived as sent
        assert all(torch.equal(v, e) for v, e in zip(values, expected, strict=True))
        return raw[1:], objects[1:]
    finally:
        group.close()
