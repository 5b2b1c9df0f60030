"""Where the gloo group stops beating a Dask hop: both timed at each size on one cluster
(`dane bench collective-crossover`), the measurement behind `--collective auto`'s bound.

At each size: the Dask hop, gloo's raw all-gather and all-reduce of the bytes, the engine's
packed all-gather of them as an object, and the engine's exchange of a phase's sums of that
many bytes (round/exchange.py), which a torch round pays."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..scaling.gloo import gloo_allgather_ms
from ..scaling.profile import hop_latency


def run_crossover(sizes_mib: tuple[float, ...], log: Callable[[str], None] = print) -> dict:
    """At each size: a dependent Dask hop passing that many bytes between two workers, and
    the gloo group's all-gather of them, raw and as the engine packs it (medians)."""
    from distributed import Client, LocalCluster

    rows = []
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        for mib in sizes_mib:
            size = int(mib * 2**20)
            hop = hop_latency(client, payload_bytes=size)["alternating_payload_ms"]
            gathered = gloo_allgather_ms(client, size, repeats=10)
            rows.append({"mib": mib, "hop_ms": hop, "gloo_raw_ms": gathered["raw_ms"],
                         "gloo_packed_ms": gathered["objects_ms"],
                         "gloo_allreduce_ms": gathered["allreduce_ms"],
                         "exchange_ms": gathered["exchange_ms"]})  # fmt: skip
            log(f"{mib} MiB: hop {hop:.1f} ms, exchange {gathered['exchange_ms']:.1f} ms, "
                f"all-reduce {gathered['allreduce_ms']:.1f} ms")  # fmt: skip
    return {"rows": rows}


def crossover_table(result: dict[str, Any]) -> str:
    lines = [
        "| MiB | Dask hop, ms | the engine's exchange, ms | gloo all-reduce, ms | exchange / "
        "all-reduce | gloo all-gather (raw), ms | packed, ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        # Rows written before the exchange existed have only the all-gathers.
        exchange, allreduce = row.get("exchange_ms"), row.get("gloo_allreduce_ms")
        ratio = f"{exchange / allreduce:.2f}" if exchange and allreduce else "-"
        lines.append(
            f"| {row['mib']:g} | {row['hop_ms']:.1f} | {_ms(exchange)} | {_ms(allreduce)} | "
            f"{ratio} | {row['gloo_raw_ms']:.1f} | {row['gloo_packed_ms']:.1f} |"
        )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
