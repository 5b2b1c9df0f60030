"""`dane bench ...`: the benchmarks' Typer sub-app, mounted by cli.py.

Each command parses its options into a bench spec, runs it through the engine's public
functions and hands the result to output.save_results (JSON, PNG, table). Options shared by
several commands are declared once, below; an option named like a `dane train` flag means
what that flag means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app_network import network
from .app_options import (
    BatchSize,
    GradSample,
    JsonOut,
    LocalSteps,
    Model,
    Networks,
    PlotOut,
    Seed,
    Store,
    Workdir,
    networks_or_standard,
    parse_numbers,
    save_result,
    spec_from_options,
)

bench_app = typer.Typer(
    help="Benchmarks through the Dask pipeline (one cluster reused for every run).",
    no_args_is_help=True,
)


@bench_app.command()
def convergence(
    problem: Annotated[
        str, typer.Option(help="ridge (synthetic-ridge, linear) | logistic (digits-tabular).")
    ] = "ridge",
    machines: Annotated[str, typer.Option(help="Shard counts m, comma-separated.")] = "4,16,64",
    samples: Annotated[
        str, typer.Option(help="ridge: training samples N, comma-separated.")
    ] = "6000,10000,14000",
    mu: Annotated[str, typer.Option(help="DANE (and fedprox) mu values, comma-separated.")] = (
        "0,0.015"
    ),
    eta: Annotated[float, typer.Option(help="DANE eta.")] = 1.0,
    rounds: Annotated[int, typer.Option(help="Iterations per run.")] = 30,
    seeds: Annotated[int, typer.Option(help="Seeds (data, partition, init) per cell.")] = 3,
    algorithms: Annotated[
        str, typer.Option(help="Comma-separated: dane, admm, one-shot, gd, agd, fedprox.")
    ] = "dane",
    local_solver: Annotated[str, typer.Option(help="Exact local solver: cg | lbfgs.")] = "cg",
    local_tol: Annotated[float, typer.Option(help="Its relative gradient tolerance.")] = 1e-10,
    rho: Annotated[
        float | None, typer.Option(help="admm penalty (default: sqrt(L * lambda_min)).")
    ] = None,
    l2: Annotated[
        float | None, typer.Option(help="L2 lambda (default: ridge 0.005, logistic 1e-3).")
    ] = None,
    workdir: Workdir = Path("bench-out/convergence"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """DANE's convergence against m, N and mu (Shamir et al. 2014, section 7), with baselines."""
    options = dict(locals())
    from .convergence import ConvergenceSpec, markdown_table, plot, run_convergence
    from .output import saving_partial

    spec = spec_from_options(
        ConvergenceSpec,
        options,
        machines=parse_numbers(machines, "--machines", int),
        samples=parse_numbers(samples, "--samples", int),
        mus=parse_numbers(mu, "--mu", float),
        algorithms=tuple(a.strip() for a in algorithms.split(",")),
    ).validate()
    result = run_convergence(spec, log=typer.echo, on_cell=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


@bench_app.command("train")
def bench_train(
    configs: Annotated[
        Path, typer.Option(help="TOML file: [defaults] and one [[run]] table per training run.")
    ],
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
) -> None:
    """Training-quality runs (e.g. CNNs on real data), one after another on one cluster:
    a started LocalCluster, or a running scheduler of yours (--scheduler, --scheduler-file).
    """
    from .output import saving_partial
    from .training import markdown_table, plot, read_runs, run_all

    if scheduler and scheduler_file:
        raise ValueError("--scheduler and --scheduler-file both name a scheduler; pass one")
    cluster = {"scheduler": scheduler} if scheduler else {}
    cluster |= {"scheduler_file": scheduler_file} if scheduler_file else {}
    runs = read_runs(configs, workdir, store=store, comm_rounds=comm_rounds, cluster=cluster)
    result = run_all(runs, log=typer.echo, on_run=saving_partial(json_out))
    save_result(result, json_out, plot_out=plot_out, plot=plot, table=markdown_table)


@bench_app.command()
def soak(
    rounds: Annotated[int, typer.Option(help="Rounds to run.")] = 300,
    warmup: Annotated[int, typer.Option(help="Rounds before the baseline is taken.")] = 30,
    workers: Annotated[int, typer.Option(help="Workers (and shards) of the local cluster.")] = 2,
    algorithm: Annotated[str, typer.Option(help="Algorithm to train.")] = "dane",
    model: Annotated[str, typer.Option(help="Model (digits store).")] = "mlp",
    local_steps: LocalSteps = 5,
    workdir: Workdir = Path("bench-out/soak"),
    json_out: JsonOut = None,
) -> None:
    """Many rounds on a small store: memory, leftover tasks and round times must stay flat."""
    options = dict(locals())
    from .soak import SoakSpec, markdown_table, run_soak

    spec = spec_from_options(SoakSpec, options).validate()
    save_result(run_soak(spec, log=typer.echo), json_out, table=markdown_table)


@bench_app.command()
def scaling(
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
    options = dict(locals())
    from .scaling import ScalingSpec, run_scaling
    from .scaling_report import markdown_table, plot

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


@bench_app.command()
def ddp(
    store: Store,
    model: Model = "lenet",
    workers: Annotated[int, typer.Option(help="DDP ranks = Dask workers.")] = 2,
    epochs: Annotated[float, typer.Option(help="DDP: passes over the training set.")] = 2.0,
    batch_size: BatchSize = 64,
    lr: Annotated[
        float, typer.Option(help="Learning rate (DDP, SGD, DANE's local solver).")
    ] = 0.05,
    momentum: Annotated[float, typer.Option(help="Momentum.")] = 0.9,
    eval_every: Annotated[int, typer.Option(help="DDP: steps between evaluations.")] = 50,
    dane_rounds: Annotated[int, typer.Option(help="DANE iterations.")] = 20,
    local_steps: LocalSteps = 50,
    grad_sample: GradSample = 1000,
    sgd_rounds: Annotated[int, typer.Option(help="dask-dane synchronous SGD rounds.")] = 200,
    runs: Annotated[
        Path | None,
        typer.Option(
            help="TOML of dask-dane runs ([defaults], [[run]] name = ...) instead of DANE and "
            "SGD from the flags above; each starts from the DDP run's settings."
        ),
    ] = None,
    target: Annotated[
        list[float] | None,
        typer.Option(metavar="ACCURACY", help="Test accuracy to reach (repeatable) [0.88]."),
    ] = None,
    single: Annotated[
        bool, typer.Option(help="Also train in one process (same cores, same global batch).")
    ] = True,
    seed: Seed = 0,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "cpu",
    network: Networks = None,
    workdir: Workdir = Path("bench-out/ddp"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """PyTorch DDP, one process and dask-dane's methods on the same shards, side by side."""
    options = dict(locals())
    from .ddp_compare import CompareSpec, default_runs, read_runs, run_compare
    from .ddp_report import compare_plot, compare_table
    from .ddp_spec import DdpSpec

    targets = tuple(target or (0.88,))
    dask_runs = (
        read_runs(runs)
        if runs
        else default_runs(
            dane_rounds=dane_rounds,
            local_steps=local_steps,
            grad_sample=grad_sample,
            sgd_rounds=sgd_rounds,
            sgd_eval_every=10,
        )
    )
    spec = spec_from_options(
        CompareSpec,
        options,
        ddp=spec_from_options(DdpSpec, options, target=targets[0]),
        runs=dask_runs,
        targets=targets,
        networks=networks_or_standard(network),
    ).validate()
    result = run_compare(spec, log=typer.echo)
    save_result(result, json_out, plot_out=plot_out, plot=compare_plot, table=compare_table)


@bench_app.command()
def single(
    store: Store,
    model: Model = "lenet",
    epochs: Annotated[float, typer.Option(help="Passes over the training set.")] = 2.0,
    batch_size: BatchSize = 64,
    lr: Annotated[float, typer.Option(help="Learning rate (SGD with momentum).")] = 0.05,
    momentum: Annotated[float, typer.Option(help="Momentum.")] = 0.9,
    lr_schedule: Annotated[
        str, typer.Option(help="constant | cosine | step, over the steps.")
    ] = "constant",
    eval_every: Annotated[int, typer.Option(help="Steps between evaluations.")] = 50,
    seed: Seed = 0,
    target: Annotated[
        list[float] | None,
        typer.Option(metavar="ACCURACY", help="Test accuracy to reach (repeatable) [0.88]."),
    ] = None,
    threads: Annotated[int, typer.Option(help="Torch threads; 0: every core.")] = 0,
    l2: Annotated[
        float | None, typer.Option(help="L2 penalty lambda (default: the store's, else 0).")
    ] = None,
    augment: Annotated[
        str, typer.Option(help="Random flips / crops of each minibatch: flip | crop=P | both.")
    ] = "",
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """One process, plain PyTorch: the same model, data and weights, no Dask (the baseline)."""
    options = dict(locals())
    from .single import SingleSpec, markdown_table, plot, run_single

    spec = spec_from_options(SingleSpec, options, targets=tuple(target or (0.88,))).validate()
    save_result(
        run_single(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


@bench_app.command()
def shards(
    config: Annotated[
        Path, typer.Option(help="TOML of `dane train` settings (no store), run on every m.")
    ],
    source: Annotated[str, typer.Option(help="Data source (as `dane prepare`).")] = (
        "fashion-mnist"
    ),
    shards: Annotated[str, typer.Option(help="Shard counts m, comma-separated.")] = "1,2,4,8,16,32",
    local_epochs: Annotated[
        float | None,
        typer.Option(help="Set --local-steps per m to this many passes over a shard."),
    ] = None,
    target: Annotated[float, typer.Option(help="Test accuracy to reach.")] = 0.91,
    seed: Annotated[int, typer.Option(help="Seed of the split into shards.")] = 0,
    workdir: Workdir = Path("bench-out/shards"),
    json_out: JsonOut = None,
    plot_out: PlotOut = None,
) -> None:
    """The same data split over 1, 2, 4... shards, one configuration: is accuracy kept?"""
    options = dict(locals())
    from .shards import ShardsSpec, markdown_table, plot, run_shards

    spec = spec_from_options(
        ShardsSpec, options, config=str(config), shards=parse_numbers(shards, "--shards", int)
    ).validate()
    save_result(
        run_shards(spec, log=typer.echo),
        json_out,
        plot_out=plot_out,
        plot=plot,
        table=markdown_table,
    )


bench_app.command()(network)
