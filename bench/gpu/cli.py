"""`dane bench gpu-correctness`: the Dask run on a GPU against the CPU reference, to 1e-9."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def gpu_correctness(
    out: Annotated[Path, typer.Option(help="JSON file to write.")],
    device: Annotated[str, typer.Option(help="cuda, or cpu to try the check.")] = "cuda",
) -> None:
    """DANE on L2-regularised logistic regression in float64: Dask on DEVICE against the
    single-process reference on the CPU (presets/scripts/gpu-check.sh runs it)."""
    import tempfile

    from ..common.output import write_json
    from .correctness import check

    with tempfile.TemporaryDirectory() as tmp:
        result = check(Path(tmp), device)
    write_json(result, out)
    typer.echo(f"{result['detail']} {result['verdict']}")


def precision(
    store: Annotated[Path, typer.Option(help="A store of images (dane prepare ...).")],
    model: Annotated[str, typer.Option(help="A model name (dane models).")] = "lenet",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "auto",
    steps: Annotated[int, typer.Option(help="Timed local steps a repeat.")] = 50,
    batch_size: Annotated[int, typer.Option(help="Rows a minibatch.")] = 64,
    repeats: Annotated[int, typer.Option(help="Timed repeats; the median is reported.")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="JSON file to write.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="PNG file to write.")] = None,
) -> None:
    """One process's time a local step in fp32 and in bf16 (--precision), on DEVICE."""
    from ..common.output import save_results
    from .precision import PrecisionSpec, precision_plot, precision_table, run_precision

    spec = PrecisionSpec(
        store=str(store), model=model, device=device, steps=steps, batch_size=batch_size,
        repeats=repeats,
    )  # fmt: skip
    result = run_precision(spec)
    save_results(result, json_out=json_out, plot_out=plot_out, plot=precision_plot,
                 table=precision_table, echo=typer.echo)  # fmt: skip


COMMANDS = {"gpu-correctness": gpu_correctness, "precision": precision}
