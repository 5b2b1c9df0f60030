"""Projecting measured runs onto a real network: the alpha-beta model, stated once.

On one machine communication is nearly free, which flatters methods with many small rounds.
From a run's measured compute, fixed cost per round and counted bytes, `project_*` estimate
its wall time on a network of bandwidth B (bytes/s) and latency a (s per message):

    sending n bytes over one link        t(n) = a + n / B

dask-dane, per round of W workers (graph.py's placement; P_k = bytes of phase k's input,
Q_k = bytes of one shard's output in phase k, d = ceil(log2 W) levels of the reduction tree):

    round = C * W0 / W  +  O  +  t(P_0)                    (driver scatters the weights)
            + sum_k [ a + (W - 1) * P_k / B ]               (the reducing worker serves W-1;
                                                              with --broadcast tree, d t(P_k))
            + sum_k d * t(Q_k)                              (tree: one merge per level)
            + t(P_0)                                        (driver gathers the new weights)
            + D / B                                         (the driver's state, both ways)

  D: the bytes the driver moves beyond the weights (comm.driver_bytes less P_0: a strategy's
  server state, such as SGD's momentum, goes out and comes back every round; measured on
  shaped links, `dane bench network`, leaving it out put synchronous SGD 47 % short).
  C: slowest worker's compute per round measured on W0 workers (strong scaling: the same work
  spread over W); O: the measured fixed cost per round (scheduler, driver). Dask workers fetch
  the phase input from the one worker that made it, so its uplink carries W - 1 copies: an
  upper bound that a broadcast tree would cut to d * t(P_k).

dask-dane in the all-gather form (rounds chained on the cluster, the driver off their path):

    round = C  +  O  +  sum_k [ a + (W - 1) * Q_k / B ]    (each worker sends its sums to the
                                                              W - 1 others, all links at once)
            + D' / B                                        (the driver's fetch of the result
                                                              and, at a start, the scatter)

  D': the round's driver_bytes as the pipelined driver counts them.

PyTorch DDP, per step (ring all-reduce of the G gradient bytes, as NCCL and gloo do):

    step = S * W0 / W  +  2 (W - 1) * a  +  2 (W - 1) / W * G / B

  S: measured compute per step on W0 ranks (the same global batch spread over W ranks).

Time to a target accuracy = rounds (or steps) to target, as measured, times the projected
round time: the projection assumes the number of rounds does not change with W, which holds
for the strong-scaling setting measured (same data, same shards) and is an assumption beyond.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Network:
    bandwidth_gbps: float  # gigabits per second
    latency_ms: float  # one message, one way

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8

    @property
    def latency_s(self) -> float:
        return self.latency_ms / 1e3

    def send_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s

    @property
    def label(self) -> str:
        return f"{self.bandwidth_gbps:g} Gbit/s, {self.latency_ms:g} ms"


# The two reference networks: a commodity cluster and a good datacentre fabric.
STANDARD_NETWORKS = (
    Network(bandwidth_gbps=1.0, latency_ms=0.5),
    Network(bandwidth_gbps=10.0, latency_ms=0.05),
)
PROJECTED_WORKERS = (2, 4, 8, 16, 32, 64)
# Round forms (metrics.jsonl's `round_form`) whose dependent steps do not grow with the
# workers: the Dask graph's all-gather and a torch group's; rows before 2026-12-07 named them
# `allgather` and `torch-gloo`, read as the same.
ALLGATHER_FORMS = ("dask", "torch", "allgather", "torch-gloo")


def parse_network(text: str) -> Network:
    """'BANDWIDTH_GBPS,LATENCY_MS' (e.g. '1,0.5'); ValueError with the expected form."""
    parts = text.split(",")
    try:
        bandwidth, latency = (float(p) for p in parts)
    except ValueError:
        raise ValueError(
            f"--network {text!r} must be BANDWIDTH_GBPS,LATENCY_MS, e.g. 1,0.5"
        ) from None
    if not (bandwidth > 0 and latency >= 0 and math.isfinite(bandwidth + latency)):
        raise ValueError(f"--network {text!r}: bandwidth must be positive and latency zero or more")
    return Network(bandwidth_gbps=bandwidth, latency_ms=latency)


def tree_depth(workers: int) -> int:
    return math.ceil(math.log2(workers)) if workers > 1 else 0


def dask_round_comm_s(
    net: Network,
    workers: int,
    phase_inputs: list[int],
    phase_outputs: list[int],
    driver_extra: int = 0,
    tree: bool = False,
) -> float:
    """Communication time of one dask-dane round (see the module docstring); `driver_extra`:
    the bytes the driver moves beyond the weights (its state both ways, comm.driver_bytes);
    `tree`: phase inputs go down graph.py's relay tree instead of all from one worker."""
    depth = tree_depth(workers)
    total = 2 * net.send_s(phase_inputs[0])  # driver -> reducing worker, and back
    total += driver_extra / net.bytes_per_s
    for sent, gathered in zip(phase_inputs, phase_outputs, strict=True):
        total += broadcast_s(net, workers, sent, tree)
        total += depth * net.send_s(gathered) if gathered else 0.0
    return total


def fan_out_plan(workers: int, *, tree: bool) -> list[list[tuple[int, int]]]:
    """How a phase input held by worker 0 reaches workers 1..W-1: levels of (from, to)
    copies, a level's copies at once, the levels in turn. Direct (the reduce collective's
    fan-out, Dask's own transfers from the first worker): one level, all from worker 0.
    Tree (a relay tree, as the per-round form had): level l copies from worker k - 2^l to
    each k in [2^l, 2^(l+1)), doubling the holders."""
    if workers < 2:
        return []
    if not tree:
        return [[(0, k) for k in range(1, workers)]]
    levels, width = [], 1
    while width < workers:
        levels.append([(k - width, k) for k in range(width, min(2 * width, workers))])
        width *= 2
    return levels


def broadcast_s(net: Network, workers: int, nbytes: float, tree: bool) -> float:
    """One phase input from the reducing worker to the W - 1 others (fan_out_plan): level
    after level, each level one latency plus the copies its busiest sender makes in turn over
    its one link (direct: W - 1; tree: one a level)."""
    total = 0.0
    for level in fan_out_plan(workers, tree=tree):
        busiest = max(Counter(sender for sender, _ in level).values())
        total += net.latency_s + busiest * nbytes / net.bytes_per_s
    return total


def project_dask_round_s(
    net: Network,
    *,
    workers: int,
    measured_workers: int,
    compute_s: float,
    fixed_s: float,
    phase_inputs: list[int],
    phase_outputs: list[int],
    driver_extra: int = 0,
    tree: bool = False,
) -> float:
    compute = compute_s * measured_workers / workers
    comm = dask_round_comm_s(net, workers, phase_inputs, phase_outputs, driver_extra, tree)
    return compute + fixed_s + comm


def project_allgather_round_s(
    net: Network,
    *,
    workers: int,
    compute_s: float,
    fixed_s: float,
    phase_outputs: list[float],
    driver_bytes: int = 0,
) -> float:
    """One round of the all-gather form (pipelined.py): per phase one latency and the W - 1
    copies of its sum each worker sends over its own link (all at once); the driver's fetch
    of the result shares a worker's link (its bytes / B, an upper bound: it overlaps the
    next round)."""
    comm = allgather_round_comm_s(net, workers, phase_outputs)
    return compute_s + fixed_s + comm + driver_bytes / net.bytes_per_s


def allgather_round_comm_s(net: Network, workers: int, phase_outputs: list[float]) -> float:
    """The all-gather form's communication a round: per phase one latency and the W - 1
    copies of its sum that each worker sends over its own link, all links at once."""
    if workers < 2:
        return 0.0
    return sum(net.latency_s + (workers - 1) * q / net.bytes_per_s for q in phase_outputs)


def ring_allreduce_s(net: Network, workers: int, nbytes: int) -> float:
    if workers < 2:
        return 0.0
    return (
        2 * (workers - 1) * net.latency_s + 2 * (workers - 1) / workers * nbytes / net.bytes_per_s
    )


def project_ddp_step_s(
    net: Network, *, workers: int, measured_workers: int, compute_s: float, grad_bytes: int
) -> float:
    return compute_s * measured_workers / workers + ring_allreduce_s(net, workers, grad_bytes)


def measure_loopback(payload_bytes: int = 32 * 2**20, pings: int = 200) -> Network:
    """Loopback's own latency (half a small round trip) and bandwidth (one large send)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(pings):
                conn.sendall(conn.recv(1))
            received = 0
            while received < payload_bytes:
                received += len(conn.recv(1 << 20))
            conn.sendall(b"k")

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        for _ in range(pings):
            conn.sendall(b"x")
            conn.recv(1)
        latency = (time.perf_counter() - started) / pings / 2
        payload = b"\0" * payload_bytes
        started = time.perf_counter()
        conn.sendall(payload)
        conn.recv(1)
        seconds = time.perf_counter() - started
    thread.join()
    server.close()
    return Network(bandwidth_gbps=payload_bytes * 8 / seconds / 1e9, latency_ms=latency * 1e3)
