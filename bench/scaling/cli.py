"""`dane bench scaling`: strong scaling, each round taken apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import (
    JsonOut,
    Networks,
    PlotOut,
    networks_or_standard,
    parse_numbers,
    save_result,
    spec_from_flags,
    spec_options,
)
from .shard_memory import MemorySpec
from .spec import ScalingSpec


@spec_options(ScalingSpec)
def scaling(
    *, network: Networks = None, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any
) -> None:
    """Strong scaling: the same data and work on 1, 2, 4... workers, each round taken apart."""
    from .report import markdown_table, plot
    from .run import run_scaling

    spec = spec_from_flags(ScalingSpec, flags, networks=networks_or_standard(network))
    save_result(
        run_scaling(spec.validate(), log=typer.echo),
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


@spec_options(MemorySpec)
def memory(*, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any) -> None:
    """Worker memory and images/s with shards held converted (float), resident (as stored)
    and streamed, on the same store and workers."""
    from .shard_memory import markdown_table, plot, run_memory

    spec = spec_from_flags(MemorySpec, flags)
    save_result(
        run_memory(spec.validate(), log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


def wire(
    repeats: Annotated[
        int, typer.Option(help="Repeats of each measure (the median is reported).")
    ] = 7,
    json_out: JsonOut = None,
) -> None:
    """A round's tensors sent in-band or as Dask frames, at ResNet-18 and small-cnn size.

    A RoundResult and a WorkerPhase: dumps and loads as a comm does, and worker A to worker
    B on a 2-worker LocalCluster, both forms in the same run."""
    from .wire import markdown_table, run_wire

    if repeats < 1:
        raise ValueError(f"--repeats must be at least 1 (got {repeats})")
    save_result(run_wire(repeats, log=typer.echo), json_out, table=markdown_table)


COMMANDS = {
    "scaling": scaling,
    "time-to-accuracy": time_to_accuracy,
    "memory": memory,
    "wire": wire,
}
