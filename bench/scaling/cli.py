"""`dane bench scaling`: strong scaling, each round taken apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import (
    BatchSize,
    GradSample,
    JsonOut,
    LocalSteps,
    Model,
    Networks,
    PlotOut,
    Store,
    Workdir,
    networks_or_standard,
    parse_numbers,
    save_result,
    spec_from_options,
)


def scaling(
    ctx: typer.Context,
    store: Store,
    model: Model = "lenet",
    algorithm: Annotated[str, typer.Option(help="Algorithm.")] = "dane",
    shards: Annotated[
        int | None, typer.Option(help="Shards the store must hold (checked).")
    ] = None,
    workers: Annotated[str, typer.Option(help="Worker counts, comma-separated.")] = "1,2,4",
    rounds: Annotated[
        int,
        typer.Option(help="Rounds per count after a warm-up one; medians leave out the last."),
    ] = 5,
    local_steps: LocalSteps = 10,
    batch_size: BatchSize = 64,
    grad_sample: GradSample = 0,
    device: Annotated[str, typer.Option(help="cpu | cuda (one worker per GPU).")] = "cpu",
    reference: Annotated[bool, typer.Option(help="Also time reference.py.")] = True,
    fixed_cost: Annotated[bool, typer.Option(help="Also time tiny rounds.")] = True,
    network: Networks = None,
    workdir: Workdir = Path("bench-out/scaling"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """Strong scaling: the same data and work on 1, 2, 4... workers, each round taken apart."""
    options = ctx.params  # every option by name, as the spec's fields are named
    from .report import markdown_table, plot
    from .run import ScalingSpec, run_scaling

    spec = spec_from_options(
        ScalingSpec,
        options,
        workers=parse_numbers(workers, "--workers", int),
        networks=networks_or_standard(network),
    ).validate()
    save_result(
        run_scaling(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


def time_to_accuracy(
    shards_json: Annotated[
        list[Path],
        typer.Argument(
            exists=True, dir_okay=False, help="`dane bench shards` JSONs (rows of each m once)."
        ),
    ],
    fixed_cost: Annotated[
        Path,
        typer.Option(
            exists=True, dir_okay=False, help="A `dane bench scaling` JSON with fixed-cost rows."
        ),
    ],
    ddp_step: Annotated[
        Path | None,
        typer.Option(
            exists=True,
            dir_okay=False,
            help="For DDP rows: a `dane bench single --threads 1` JSON at a rank's batch.",
        ),
    ] = None,
    target: Annotated[str, typer.Option(help="Test accuracies, comma-separated.")] = "0.88,0.91",
    compute_speedup: Annotated[
        str, typer.Option(help="Compute speed-ups to project at, comma-separated.")
    ] = "1,10,100",
    network: Networks = None,
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """Each method's time to target on m workers, projected from a shards sweep."""
    from .time_report import markdown_table, plot
    from .time_to_accuracy import project_sweep

    targets = parse_numbers(target, "--target", float)
    speedups = parse_numbers(compute_speedup, "--compute-speedup", float)
    if not all(0 < t <= 1 for t in targets) or not all(k > 0 for k in speedups):
        raise ValueError("--target must lie in (0, 1] and --compute-speedup above 0")
    result = project_sweep(
        [read_json(path, "SHARDS_JSON") for path in shards_json],
        read_json(fixed_cost, "--fixed-cost"),
        ddp_step=read_json(ddp_step, "--ddp-step") if ddp_step else None,
        targets=targets,
        networks=networks_or_standard(network),
        speedups=speedups,
    )
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


def read_json(path: Path, what: str) -> dict:
    import json

    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} {path} is not JSON ({error}); pass a bench result") from None


COMMANDS = {"scaling": scaling, "time-to-accuracy": time_to_accuracy}
