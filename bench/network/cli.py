"""`dane bench network`: every method on real links, in network namespaces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import (
    BatchSize,
    JsonOut,
    LocalSteps,
    Model,
    PlotOut,
    Seed,
    save_result,
    spec_from_options,
)

Bandwidth = Annotated[str, typer.Option(help="Link rates to measure, comma-separated tc rates.")]
Methods = Annotated[str, typer.Option(help="Comma-separated, of dane, ddp, sgd, fedavg.")]
Broadcast = Annotated[
    str, typer.Option(help="dask-dane runs once per mode given: auto, direct, tree, allgather.")
]
Target = Annotated[
    float | None, typer.Option(help="Test accuracy: report the time to it, stop there.")
]
ExtraConfig = Annotated[
    Path | None, typer.Option(help="One more DANE-family run: a `dane train --config` TOML.")
]
Faults = Annotated[
    bool,
    typer.Option(
        help="Instead: the first method at the first bandwidth, undisturbed and under each "
        "fault of the wire (partition, flap, collapse); weights must equal."
    ),
]
Cleanup = Annotated[
    bool, typer.Option(help="Only remove namespaces an earlier run left behind, and exit.")
]


def network(
    ctx: typer.Context,
    store: Annotated[
        str | None, typer.Option(help="Store to train on (written by `dane prepare`).")
    ] = None,
    model: Model = "compact-cnn",
    workers: Annotated[int, typer.Option(help="Worker namespaces (Dask workers, DDP ranks).")] = 2,
    bandwidth: Bandwidth = "1gbit,100mbit,10mbit",
    methods: Methods = "dane,ddp,sgd,fedavg",
    broadcast: Broadcast = "auto",
    rounds: Annotated[
        int, typer.Option(help="DANE iterations; the others read as many images.")
    ] = 10,
    target: Target = None,
    config: ExtraConfig = None,
    local_steps: LocalSteps = 50,
    grad_sample: Annotated[int, typer.Option(help="DANE: gradient rows per shard; 0: all.")] = 0,
    batch_size: BatchSize = 64,
    lr: Annotated[float, typer.Option(help="Learning rate of every method.")] = 0.05,
    seed: Seed = 0,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the cluster.")] = 120.0,
    faults: Faults = False,
    cleanup: Cleanup = False,
    workdir: Annotated[Path, typer.Option(help="Run directories and logs.")] = Path(
        "bench-out/network"
    ),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """Every method on real links: workers in network namespaces behind shaped veth links.

    Needs root, iproute2 (`ip`, `tc`) and the tbf qdisc; refuses with exit 2 otherwise.
    """
    from .netns import NetnsUnavailable, check_can_run
    from .netns import cleanup as remove_leftovers
    from .spec import NetworkSpec

    if cleanup:
        removed = remove_leftovers()
        typer.echo(f"removed {len(removed)} namespace(s): {', '.join(removed) or 'none'}")
        return
    if store is None:
        raise ValueError("--store is required (a store written by `dane prepare`)")
    spec = spec_from_options(
        NetworkSpec,
        ctx.params,
        bandwidths=tuple(b.strip() for b in bandwidth.split(",") if b.strip()),
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
        broadcasts=tuple(m.strip() for m in broadcast.split(",") if m.strip()),
        config=str(config) if config else None,
    ).validate()
    try:
        check_can_run()
    except NetnsUnavailable as err:
        raise ValueError(str(err)) from None
    _run(spec, faults, json_out, plot_out)


def _run(spec: Any, faults: bool, json_out: Path | None, plot_out: Path | None) -> None:
    from .report import faults_table, network_plot, network_table

    if faults:
        from .faults import run_faults

        save_result(run_faults(spec, log=typer.echo), json_out, table=faults_table)
        return
    from .bench import run_network

    result = run_network(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=network_plot, table=network_table)


COMMANDS = {"network": network}
