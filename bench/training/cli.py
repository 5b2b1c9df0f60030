"""The training benchmarks: `dane bench train` (the runs of a TOML, one after another),
`dane bench shards` (one setting on m = 1, 2, 4... shards), `dane bench local-steps` (more
local work against fewer rounds), `dane bench skew-summary` (the
skewed races summed up) and `dane bench correction-noise` (DANE's correction against its
sampling error)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..common.options import (
    JsonOut,
    PlotOut,
    Workdir,
    save_result,
    spec_from_flags,
    spec_options,
)
from .defaults import DefaultsSpec
from .local_steps import LocalStepsSpec
from .shards import ShardsSpec


def bench_train(
    *,
    config: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="<path>",
            help="TOML file: [defaults] and one [[run]] table per training run; repeat it to "
            "run several files' runs in turn.",
        ),
    ] = None,
    json_out: Annotated[Path, typer.Option("--json", help="Write the results here (JSON).")],
    plot_out: PlotOut = None,
    workdir: Workdir = Path("bench-out/training"),
    store: Annotated[
        str | None, typer.Option(help="Train every run on this store instead of its own.")
    ] = None,
    comm_rounds: Annotated[
        int | None,
        typer.Option(help="Every run's budget of communication rounds (DANE: 2 a round)."),
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="Run on this running Dask scheduler (an address).")
    ] = None,
    scheduler_file: Annotated[
        str | None, typer.Option(help="Run on the scheduler this `--scheduler-file` names.")
    ] = None,
    # Its former name: `--config`, as `dane train` and the other benches name a settings file.
    configs: Annotated[list[Path] | None, typer.Option(hidden=True)] = None,
) -> None:
    """Training-quality runs (e.g. CNNs on real data), one after another on one cluster:
    a started LocalCluster, or a running scheduler of yours (--scheduler, --scheduler-file).
    """
    from ..common.output import saving_partial
    from .train import markdown_table, plot, read_runs, run_all

    paths = [*(config or []), *(configs or [])]
    if not paths:  # required, but the hidden --configs may stand for it
        raise ValueError("dane bench train needs --config FILE (the runs' TOML)")
    if scheduler and scheduler_file:
        raise ValueError("--scheduler and --scheduler-file both name a scheduler; pass one")
    cluster = {"scheduler": scheduler} if scheduler else {}
    cluster |= {"scheduler_file": scheduler_file} if scheduler_file else {}
    runs = read_runs(paths, workdir, store=store, comm_rounds=comm_rounds, cluster=cluster)
    result = run_all(runs, log=typer.echo, on_run=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


@spec_options(ShardsSpec)
def shards(
    *,
    config: Annotated[
        Path, typer.Option(help="TOML of `dane train` settings (no store), run on every m.")
    ],
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
    **flags: Any,
) -> None:
    """The same data split over 1, 2, 4... shards, one configuration: is accuracy kept?"""
    from .shards import markdown_table, plot, read_config, run_shards

    spec = spec_from_flags(ShardsSpec, flags, run=read_config(config)).validate()
    save_result(
        run_shards(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


@spec_options(DefaultsSpec)
def defaults(*, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any) -> None:
    """Which settings a first run survives: candidates on networks with and without
    BatchNorm, on two stores; the training loss after every round against the initial one."""
    from .defaults import run_study
    from .defaults_report import markdown_table, plot

    spec = spec_from_flags(DefaultsSpec, flags).validate()
    save_result(
        run_study(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


@spec_options(LocalStepsSpec)
def local_steps(*, json_out: JsonOut = None, plot_out: PlotOut = None, **flags: Any) -> None:
    """More local work a round against fewer rounds: DANE (defaults and mu = 0) and FedAvg at
    K = 30 ... 1000 on digits and Fashion-MNIST; collapses and rounds to target per K."""
    from ..common.output import saving_partial
    from .local_steps import run_study
    from .local_steps_report import markdown_table, plot

    spec = spec_from_flags(LocalStepsSpec, flags).validate()
    save_result(
        run_study(spec, log=typer.echo, on_run=saving_partial(json_out)),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


def skew_summary(
    results: Annotated[
        list[Path],
        typer.Argument(exists=True, dir_okay=False, help="`dane bench train` JSON results."),
    ],
    target: Annotated[
        float | None, typer.Option(help="Also show the rounds each run took to this accuracy.")
    ] = None,
) -> None:
    """The skewed-shard races summed up: per store, each method at its best learning rate."""
    import json

    from .skew import by_store, store_table

    loaded = [json.loads(path.read_text()) for path in results]
    for name, result in sorted(by_store(loaded).items()):
        typer.echo(store_table(name, result, target=target))


def correction_noise(
    store: Annotated[str, typer.Option(help="Store to measure on.")],
    model: Annotated[str, typer.Option(help="Model.")] = "compact-cnn",
    checkpoint: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="Weights to measure at [round 0's]."),
    ] = None,
    sample: Annotated[int, typer.Option(help="Rows of --grad-sample.")] = 1000,
    draws: Annotated[int, typer.Option(help="Sample seeds to average over.")] = 5,
) -> None:
    """How much of DANE's correction is signal: the true correction against the error a
    --grad-sample adds, per shard, as JSON."""
    import json

    from ...pipeline.engine.run.checkpoint import load_checkpoint
    from ...pipeline.setup.config import RunConfig
    from ...pipeline.setup.run_setup import initial_weights, prepare_run
    from .correction_noise import measure

    config = RunConfig(store=store, model=model).validate()
    if checkpoint:
        weights = load_checkpoint(checkpoint)["weights"]
    else:
        weights = initial_weights(prepare_run(config).spec, config.seed)
    result = measure(config, weights, sample, draws)
    typer.echo(
        json.dumps({**result, "checkpoint": str(checkpoint) if checkpoint else None}, indent=1)
    )


COMMANDS = {
    "train": bench_train,
    "shards": shards,
    "defaults": defaults,
    "local-steps": local_steps,
    "skew-summary": skew_summary,
    "correction-noise": correction_noise,
}
