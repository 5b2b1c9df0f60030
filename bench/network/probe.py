"""How long gloo's all-reduce of one gradient takes on a NetnsCluster's links, measured.

network.py's ring term assumes the all-reduce drives every link at its rate in both
directions. On shaped links gloo falls short of that (measured: 0.375 s for 353 KB between
2 ranks at 10 Mbit/s, where the bytes need 0.296 s), so `dane bench network` projects DDP
with the time this probe measures for the run's own gradient size, not with bytes / rate.

`python -m dask_dane.bench.network.probe RANK MASTER NUMEL REPEATS WORLD` is one rank.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from .netns import NetnsCluster

PROBE_PORT = 29511
REPEATS = 30
GAP_S = 0.04  # a DDP step's compute between two all-reduces, roughly: links go idle


def measure(cluster: NetnsCluster, numel: int, repeats: int = REPEATS) -> float:
    """Median seconds of an all-reduce of `numel` float32 values over the cluster's links."""
    procs = [
        subprocess.Popen(
            [
                *cluster.exec_prefix(node),
                sys.executable,
                "-m",
                "dask_dane.bench.network.probe",
                str(rank),
                cluster.address("w0"),
                str(numel),
                str(repeats),
                str(cluster.workers),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "GLOO_SOCKET_IFNAME": "eth0"},
        )
        for rank, node in enumerate(cluster.worker_nodes)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        raise RuntimeError(f"the all-reduce probe failed: {outputs}")
    return float(outputs[0].strip().splitlines()[-1])


def _rank(rank: int, master: str, numel: int, repeats: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://{master}:{PROBE_PORT}", rank=rank, world_size=world
    )
    values, times = torch.ones(numel), []
    dist.all_reduce(values)  # the first one sets up the connections
    for _ in range(repeats):
        time.sleep(GAP_S)
        started = time.perf_counter()
        dist.all_reduce(values)
        times.append(time.perf_counter() - started)
    dist.destroy_process_group()
    print(statistics.median(times))


if __name__ == "__main__":
    rank, master, numel, repeats, world = sys.argv[1:6]
    _rank(int(rank), master, int(numel), int(repeats), int(world))
