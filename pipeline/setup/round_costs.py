"""What a round costs besides its local steps, measured on the run's cluster as it starts
(--overhead-share chooses K from it: parts/local_work.py).

The ideas of `dane bench scaling`'s fixed cost (bench/scaling/profile.py, gloo.py), measured by
the engine on the run's own workers, in about a second:
- c: local steps of the run's model, batch size and solver, timed on every worker at once on
  rows of its first shard (setup/measured_steps.py time_local_work), the slowest worker's,
  times the shards the busiest worker holds (it runs their steps one after another); where
  the round has phases besides the local steps (DANE's gradient), a gradient pass timed there
  too, counted in F;
- --collective dask: chains of pinned one-line tasks alternating between two workers, passing
  nothing and passing the model's bytes: a dependent hop's scheduling, and what moving the
  bytes adds to it. A round takes a hop a phase, and one more where its last phase's sums are
  split off the shards' states (graph.py);
- --collective torch: the run's gloo group, formed as a segment forms it (under the same
  leases), all-gathering one byte and the model's bytes: one of each a phase.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from distributed import get_worker
from distributed.comm import get_address_host

from ..algorithms.parts.local_work import RoundCosts
from ..engine.plan import RunSetup
from ..engine.round import comm
from ..engine.round.group import GroupSpec
from ..engine.run.bounded import wait_for
from ..engine.run.segment import form_group
from ..engine.run.segment_cluster import lock_workers, release
from .measured_steps import gradient_rows, solver_of, time_local_work

HOPS = 8  # dependent tasks in a timed chain
REPEATS = 3  # chains (or all-gathers) timed; the median counts
SAMPLE_ROWS = 512  # at most this many rows of shard 0 loaded to time the steps on


def measure_round_costs(
    client: Any,
    setup: RunSetup,
    placement: list[str],
    collective: str,
    note: Callable[[str], None],
) -> RoundCosts:
    """A round's costs on this cluster (the module docstring); `placement`: each shard's
    worker, `collective`: the form the rounds will take (dask | torch), `note`: a line for
    the user (a lease on the workers waited for: Callbacks.on_note)."""
    workers = list(dict.fromkeys(placement))
    busiest = max(Counter(placement).values())
    phases = len(setup.strategy.phases)
    pass_rows, rows_a_step = gradient_rows(setup)
    step_s, row_s = _local_work(client, setup, placement, gradient=phases > 1)
    model_bytes = comm.payload_bytes([setup.weights, setup.buffers])
    timeout = setup.config.timeout
    if collective == "torch":
        group_timeout = setup.config.collective_timeout
        empty_s, full_s = _group_s(client, workers, model_bytes, group_timeout, note)
        hops = phases
    else:
        empty_s, full_s = _hop_s(client, workers, model_bytes, timeout)
        split = setup.strategy.shard_state_type is not None and len(workers) > 1
        hops = phases + int(split)
    others = phases - 1  # phases without local steps, each a gradient pass over its rows
    return RoundCosts(
        step_s=busiest * (step_s + others * rows_a_step * row_s),
        hops_s=hops * empty_s,
        phases_s=busiest * others * pass_rows * row_s,
        comm_s=phases * max(full_s - empty_s, 0.0),
    )


def _local_work(
    client: Any, setup: RunSetup, placement: list[str], *, gradient: bool
) -> tuple[float, float]:
    """time_local_work on every worker at once, each on the first rows of its first shard, as
    a round's workers compute side by side (on a shared machine they slow each other): the
    slowest worker's step and gradient row, which a round waits for."""
    rows = max(4 * setup.config.batch_size, SAMPLE_ROWS)
    common = (setup.weights, setup.buffers, solver_of(setup))
    futures = [
        client.submit(
            time_local_work, setup.spec, setup.shard_args(placement.index(worker)), *common,
            rows=rows, gradient=gradient, workers=[worker], pure=False,
        )
        for worker in dict.fromkeys(placement)
    ]  # fmt: skip
    wait_for(client, futures, setup.config.timeout)
    timed = [future.result() for future in futures]
    return max(step for step, _ in timed), max(row for _, row in timed)


def _pass(value: Any) -> Any:
    return value


def _hop_s(
    client: Any, workers: list[str], model_bytes: int, timeout: float
) -> tuple[float, float]:
    """Seconds a dependent hop between two workers takes (one worker: on itself), passing
    nothing and passing `model_bytes` (medians of REPEATS chains)."""
    path = [workers[i % len(workers[:2])] for i in range(HOPS)]

    def chain(start: Any) -> float:
        value = client.submit(_pass, start, workers=[path[-1]], pure=False)
        wait_for(client, [value], timeout)  # the chain starts from data on a worker
        begun = time.perf_counter()
        for worker in path:
            value = client.submit(_pass, value, workers=[worker], pure=False)
        wait_for(client, [value], timeout)
        return (time.perf_counter() - begun) / len(path)

    payload = torch.zeros(model_bytes, dtype=torch.uint8)
    empty = statistics.median(chain(0) for _ in range(REPEATS))
    return empty, statistics.median(chain(payload) for _ in range(REPEATS))


def _group_s(
    client: Any, workers: list[str], model_bytes: int, timeout: float, note: Callable[[str], None]
) -> tuple[float, float]:
    """Seconds a gloo all-gather on every worker takes (rank 0's medians), of one byte and of
    `model_bytes`, in a group formed as a segment's is, under the segments' leases."""
    spec = GroupSpec(name=f"costs-{uuid.uuid4().hex[:8]}", world=len(workers), timeout_s=timeout)
    locks = lock_workers(client, workers, note)
    try:
        futures = [
            client.submit(
                _time_group, spec, rank, model_bytes, key=f"{spec.name}-{rank}",
                workers=[worker], pure=False,
            )
            for rank, worker in enumerate(workers)
        ]  # fmt: skip
        wait_for(client, futures, timeout)
        return futures[0].result()
    finally:
        release(locks, timeout)


def _time_group(spec: GroupSpec, rank: int, model_bytes: int) -> tuple[float, float]:
    """On a worker: this rank's medians of REPEATS all-gathers of one byte and of the model's
    bytes (the first of each, the connections' warm-up, left out)."""
    group = form_group(spec, rank, get_address_host(get_worker().address))
    try:
        medians = []
        for size in (1, model_bytes):
            payload = torch.zeros(size, dtype=torch.uint8)
            times = []
            for _ in range(REPEATS + 1):
                begun = time.perf_counter()
                group.allgather_tensor(payload)
                times.append(time.perf_counter() - begun)
            medians.append(statistics.median(times[1:]))
        return medians[0], medians[1]
    finally:
        group.close()
