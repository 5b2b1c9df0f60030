"""`dane bench network` (app.py mounts it on bench_app; a file of its own, as app.py is full)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app_options import (
    BatchSize,
    JsonOut,
    LocalSteps,
    Model,
    PlotOut,
    Seed,
    save_result,
    spec_from_options,
)


def network(
    store: Annotated[
        str | None, typer.Option(help="Store to train on (written by `dane prepare`).")
    ] = None,
    model: Model = "compact-cnn",
    workers: Annotated[int, typer.Option(help="Worker namespaces (Dask workers, DDP ranks).")] = 2,
    bandwidth: Annotated[
        str, typer.Option(help="Link rates to measure, comma-separated tc rates.")
    ] = "1gbit,100mbit,10mbit",
    methods: Annotated[
        str, typer.Option(help="Comma-separated, of dane, ddp, sgd, fedavg.")
    ] = "dane,ddp,sgd,fedavg",
    broadcast: Annotated[
        str, typer.Option(help="dask-dane runs once per mode given: auto, direct, tree.")
    ] = "auto",
    rounds: Annotated[
        int, typer.Option(help="DANE iterations; the others read as many images.")
    ] = 10,
    target: Annotated[
        float | None, typer.Option(help="Test accuracy: report the time to it, stop there.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="One more DANE-family run: a `dane train --config` TOML.")
    ] = None,
    local_steps: LocalSteps = 50,
    grad_sample: Annotated[int, typer.Option(help="DANE: gradient rows per shard; 0: all.")] = 0,
    batch_size: BatchSize = 64,
    lr: Annotated[float, typer.Option(help="Learning rate of every method.")] = 0.05,
    seed: Seed = 0,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the cluster.")] = 120.0,
    faults: Annotated[
        bool,
        typer.Option(
            help="Instead: the first method at the first bandwidth, undisturbed and under each "
            "fault of the wire (partition, flap, collapse); weights must equal."
        ),
    ] = False,
    cleanup: Annotated[
        bool, typer.Option(help="Only remove namespaces an earlier run left behind, and exit.")
    ] = False,
    workdir: Annotated[Path, typer.Option(help="Run directories and logs.")] = Path(
        "bench-out/network"
    ),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """Every method on real links: workers in network namespaces behind shaped veth links.

    Needs root, iproute2 (`ip`, `tc`) and the tbf qdisc; refuses with exit 2 otherwise.
    """
    options = dict(locals())
    from .netns import NetnsUnavailable, check_can_run
    from .netns import cleanup as remove_leftovers
    from .network_bench import run_network
    from .network_report import network_plot, network_table
    from .network_spec import NetworkSpec

    if cleanup:
        removed = remove_leftovers()
        typer.echo(f"removed {len(removed)} namespace(s): {', '.join(removed) or 'none'}")
        return
    if store is None:
        raise ValueError("--store is required (a store written by `dane prepare`)")
    spec = spec_from_options(
        NetworkSpec,
        options,
        bandwidths=tuple(b.strip() for b in bandwidth.split(",") if b.strip()),
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
        broadcasts=tuple(m.strip() for m in broadcast.split(",") if m.strip()),
        config=str(config) if config else None,
    ).validate()
    try:
        check_can_run()
    except NetnsUnavailable as err:
        raise ValueError(str(err)) from None
    if faults:
        from .network_faults import run_faults
        from .network_report import faults_table

        result = run_faults(spec, log=typer.echo)
        save_result(result, json_out, table=faults_table)
        return
    result = run_network(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=network_plot, table=network_table)
