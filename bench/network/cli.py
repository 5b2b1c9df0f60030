"""`dane bench network`: every method on real links, in network namespaces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import JsonOut, PlotOut, save_result, spec_from_flags, spec_options
from .spec import NetworkSpec

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


@spec_options(NetworkSpec)
def network(
    *,
    faults: Faults = False,
    cleanup: Cleanup = False,
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
    **flags: Any,
) -> None:
    """Every method on real links: workers in network namespaces behind shaped veth links.

    Needs root, iproute2 (`ip`, `tc`) and the tbf qdisc; refuses with exit 2 otherwise.
    """
    from .netns import NetnsUnavailable, check_can_run
    from .netns import cleanup as remove_leftovers

    if cleanup:
        removed = remove_leftovers()
        typer.echo(f"removed {len(removed)} namespace(s): {', '.join(removed) or 'none'}")
        return
    spec = spec_from_flags(NetworkSpec, flags).validate()
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
