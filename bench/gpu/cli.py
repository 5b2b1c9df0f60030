"""`dane bench gpu-correctness`: the Dask run on a GPU against the CPU reference, to 1e-9."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import JsonOut, PlotOut, save_result, spec_from_flags, spec_options
from .precision import PrecisionSpec


def gpu_correctness(
    *,
    json_out: Annotated[Path | None, typer.Option("--json", help="JSON file to write.")] = None,
    device: Annotated[str, typer.Option(help="cuda, or cpu to try the check.")] = "cuda",
    # Its former name: `--json`, as every other bench names the results file.
    out: Annotated[Path | None, typer.Option(hidden=True)] = None,
) -> None:
    """DANE on L2-regularised logistic regression in float64: Dask on DEVICE against the
    single-process reference on the CPU (presets/scripts/gpu-check.sh runs it)."""
    import tempfile

    from ..common.output import write_json
    from .correctness import check

    path = json_out or out
    if path is None:  # required, but the hidden --out may stand for it
        raise ValueError("dane bench gpu-correctness needs --json FILE")
    with tempfile.TemporaryDirectory() as tmp:
        result = check(Path(tmp), device)
    write_json(result, path)
    typer.echo(f"{result['detail']} {result['verdict']}")


@spec_options(PrecisionSpec)
def precision(*, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any) -> None:
    """One process's time a local step in fp32, in bf16 (--precision) and in plain PyTorch."""
    from .precision import precision_plot, precision_table, run_precision

    result = run_precision(spec_from_flags(PrecisionSpec, flags))
    save_result(result, json_out, plot_out=plot_out, plot=precision_plot, table=precision_table)


COMMANDS = {"gpu-correctness": gpu_correctness, "precision": precision}
