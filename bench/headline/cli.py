"""`dane bench headline`: does each doubling of workers nearly halve the time to accuracy,
with DANE? Measured on m = 1, 2, 4, 8 shards, projected onto m workers and real links."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..common.options import (
    JsonOut,
    Networks,
    PlotOut,
    Workdir,
    networks_or_standard,
    parse_numbers,
    save_result,
)

# The options of `dane bench headline`; those whose default the pilot changes default to None.
DaneConfig = Annotated[
    str, typer.Option(help="DANE's recipe: a TOML of `dane train` settings, no store.")
]
FedavgConfig = Annotated[
    str, typer.Option(help="FedAvg's recipe: a TOML of `dane train` settings, no store.")
]
Source = Annotated[str, typer.Option(help="Data source (as `dane prepare`).")]
Model = Annotated[str, typer.Option(help="Model of every run.")]
Shards = Annotated[str, typer.Option(help="Shard counts m, comma-separated.")]
Seeds = Annotated[
    str | None,
    typer.Option(help="Seeds (of the split, weights and order) [default: 0,1,2; pilot: 0]."),
]
Passes = Annotated[
    float | None, typer.Option(help="The budget: passes over the data [default: 5; pilot: 3].")
]
DataFraction = Annotated[
    float | None,
    typer.Option(help="Share of the training and test rows kept [default: 1; pilot: 0.2]."),
]
Targets = Annotated[
    str | None,
    typer.Option(help="Test accuracies, comma-separated [default: 0.88,0.9; pilot: 0.6,0.7]."),
]
Pilot = Annotated[
    bool, typer.Option(help="The pilot's defaults: a fifth of the rows, 3 passes, one seed.")
]
Ddp = Annotated[bool, typer.Option(help="Also DDP at m ranks beside DANE's recipe.")]
FixedCost = Annotated[
    Path | None,
    typer.Option(help="Reuse the fixed costs of this earlier headline JSON (same machine)."),
]
Speedups = Annotated[str, typer.Option(help="Compute speed-ups to project at, comma-separated.")]


def headline(
    *,
    dane_config: DaneConfig = "preset:dane-many-workers",
    fedavg_config: FedavgConfig = "preset:fashion-mnist-scale",
    source: Source = "fashion-mnist",
    model: Model = "compact-cnn",
    shards: Shards = "1,2,4,8",
    seeds: Seeds = None,
    passes: Passes = None,
    data_fraction: DataFraction = None,
    targets: Targets = None,
    pilot: Pilot = False,
    ddp: Ddp = True,
    fixed_cost: FixedCost = None,
    compute_speedup: Speedups = "1,10,100",
    network: Networks = None,
    workdir: Workdir = Path("bench-out/headline"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """The time to accuracy as workers double: DANE against FedAvg and DDP, on 1 ... 8 shards.

    Runs DANE's and FedAvg's recipes and DDP at m ranks on m = 1, 2, 4, 8 iid shards of
    Fashion-MNIST (compact-cnn), 3 seeds; reports the time, examples and rounds to 88 % and
    90 % and the final accuracy after 5 passes (measured), the time to each target on m
    workers at 1x, 10x and 100x this machine's compute over 10 and 1 Gbit/s links (projected
    from the measured compute, fixed cost a round and payloads), the speed-up per doubling
    T(m) / T(2m), and the targets met or not. On 2 idle cores --pilot (a fifth of the rows,
    3 passes, targets 60 % and 70 %, one seed) takes about 9 minutes, the full grid about 3
    hours (the pilot's training scaled: 5x the rows, 5/3 the passes, 3 seeds).
    """
    from ..common.output import saving_partial
    from .report import markdown_table, plot
    from .run import run_headline
    from .spec import headline_spec

    spec = headline_spec(
        pilot=pilot,
        dane_config=dane_config,
        fedavg_config=fedavg_config,
        source=source,
        model=model,
        shards=parse_numbers(shards, "--shards", int),
        seeds=parse_numbers(seeds, "--seeds", int) if seeds is not None else None,
        passes=passes,
        data_fraction=data_fraction,
        targets=parse_numbers(targets, "--targets", float) if targets is not None else None,
        ddp=ddp,
        fixed_cost=str(fixed_cost) if fixed_cost else None,
        networks=networks_or_standard(network),
        speedups=parse_numbers(compute_speedup, "--compute-speedup", float),
        workdir=str(workdir),
    )
    result = run_headline(spec, log=typer.echo, on_partial=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


COMMANDS = {"headline": headline}
