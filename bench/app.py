"""`dane bench ...`: the benchmarks' Typer sub-app, mounted by cli.py.

Each command parses its options into a bench spec, runs it through the engine's public
functions and hands the result to output.save_results (JSON, table, PNG).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

bench_app = typer.Typer(
    help="Benchmarks through the Dask pipeline (one cluster reused for every run).",
    no_args_is_help=True,
)


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"{flag} must be a comma-separated list of integers (got {text!r})"
        ) from None


def _float_list(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"{flag} must be a comma-separated list of numbers (got {text!r})"
        ) from None


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
    workdir: Annotated[Path, typer.Option(help="Where stores and run directories go.")] = Path(
        "bench-out/convergence"
    ),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write the figure here.")] = None,
) -> None:
    """DANE's convergence against m, N and mu (Shamir et al. 2014, section 7), with baselines."""
    from .convergence import (
        ConvergenceSpec,
        markdown_table,
        plot,
        run_convergence,
        write_json,
    )

    spec = ConvergenceSpec(
        problem=problem,
        machines=_int_list(machines, "--machines"),
        samples=_int_list(samples, "--samples"),
        mus=_float_list(mu, "--mu"),
        eta=eta,
        rounds=rounds,
        seeds=seeds,
        algorithms=tuple(a.strip() for a in algorithms.split(",")),
        local_solver=local_solver,
        local_tol=local_tol,
        rho=rho,
        l2=l2,
        workdir=str(workdir),
    ).validate()
    if local_solver not in ("cg", "lbfgs"):
        raise ValueError(
            f"--local-solver must be cg or lbfgs for this benchmark (got {local_solver!r})"
        )
    command = "dane " + " ".join(sys.argv[1:])

    def save(partial: dict[str, Any]) -> None:
        if json_out is not None:
            write_json({**partial, "command": command}, json_out)

    result = {**run_convergence(spec, log=typer.echo, on_cell=save), "command": command}
    save(result)
    if plot_out is not None:
        plot(result, plot_out)
    typer.echo(markdown_table(result))


@bench_app.command("train")
def bench_train(
    configs: Annotated[
        Path, typer.Option(help="TOML file: [defaults] and one [[run]] table per training run.")
    ],
    json_out: Annotated[Path, typer.Option("--json", help="Write the results here.")],
    workdir: Annotated[Path, typer.Option(help="Where run directories go.")] = Path(
        "bench-out/training"
    ),
) -> None:
    """Training-quality runs (e.g. CNNs on real data), one after another on one cluster."""
    from .training import read_runs, run_all

    run_all(read_runs(configs, workdir), json_out)


@bench_app.command()
def soak(
    rounds: Annotated[int, typer.Option(help="Rounds to run.")] = 300,
    warmup: Annotated[int, typer.Option(help="Rounds before the baseline is taken.")] = 30,
    workers: Annotated[int, typer.Option(help="Workers (and shards) of the local cluster.")] = 2,
    algorithm: Annotated[str, typer.Option(help="Algorithm to train.")] = "dane",
    model: Annotated[str, typer.Option(help="Model (digits store).")] = "mlp",
    local_steps: Annotated[int, typer.Option(help="Local steps per round.")] = 5,
    workdir: Annotated[Path, typer.Option(help="Where the store and run directory go.")] = Path(
        "bench-out/soak"
    ),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
) -> None:
    """Many rounds on a small store: memory, leftover tasks and round times must stay flat."""
    from .soak import SoakSpec, markdown_table, run_soak, write_json

    spec = SoakSpec(
        rounds=rounds,
        warmup=warmup,
        workers=workers,
        algorithm=algorithm,
        model=model,
        local_steps=local_steps,
        workdir=str(workdir),
    ).validate()
    result = run_soak(spec, log=typer.echo)
    result["command"] = "dane " + " ".join(sys.argv[1:])
    if json_out is not None:
        write_json(result, json_out)
    typer.echo(markdown_table(result))


@bench_app.command()
def scaling(
    store: Annotated[str, typer.Option(help="Store to train on (fixed for all counts).")],
    model: Annotated[str, typer.Option(help="Model.")] = "lenet",
    algorithm: Annotated[str, typer.Option(help="Algorithm.")] = "dane",
    shards: Annotated[
        int | None, typer.Option(help="Shards the store must hold (checked).")
    ] = None,
    workers: Annotated[str, typer.Option(help="Worker counts, comma-separated.")] = "1,2,4",
    rounds: Annotated[
        int,
        typer.Option(help="Rounds per count after a warm-up one; medians leave out the last."),
    ] = 5,
    local_steps: Annotated[int, typer.Option(help="Local steps K.")] = 10,
    batch_size: Annotated[int, typer.Option(help="Minibatch size.")] = 64,
    grad_sample: Annotated[int, typer.Option(help="DANE gradient rows per shard; 0: all.")] = 0,
    device: Annotated[str, typer.Option(help="cpu | cuda (one worker per GPU).")] = "cpu",
    reference: Annotated[bool, typer.Option(help="Also time reference.py.")] = True,
    fixed_cost: Annotated[bool, typer.Option(help="Also time tiny rounds.")] = True,
    network: Annotated[
        list[str] | None,
        typer.Option(help="BANDWIDTH_GBPS,LATENCY_MS to project onto (repeatable)."),
    ] = None,
    workdir: Annotated[Path, typer.Option(help="Run directories go here.")] = Path(
        "bench-out/scaling"
    ),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write the figure here.")] = None,
) -> None:
    """Strong scaling: the same data and work on 1, 2, 4... workers, each round taken apart."""
    from .scaling import ScalingSpec, run_scaling
    from .scaling_report import markdown_table, plot

    spec = ScalingSpec(
        store=store,
        model=model,
        algorithm=algorithm,
        shards=shards,
        workers=_int_list(workers, "--workers"),
        rounds=rounds,
        local_steps=local_steps,
        batch_size=batch_size,
        grad_sample=grad_sample,
        device=device,
        reference=reference,
        fixed_cost=fixed_cost,
        workdir=str(workdir),
        networks=_networks(network),
    ).validate()
    _save_bench(run_scaling(spec, log=typer.echo), json_out, plot_out, plot, markdown_table)


@bench_app.command()
def ddp(
    store: Annotated[str, typer.Option(help="Store to train on.")],
    model: Annotated[str, typer.Option(help="Model.")] = "lenet",
    workers: Annotated[int, typer.Option(help="DDP ranks = Dask workers.")] = 2,
    epochs: Annotated[float, typer.Option(help="DDP: passes over the training set.")] = 2.0,
    batch_size: Annotated[int, typer.Option(help="Minibatch per rank / shard.")] = 64,
    lr: Annotated[
        float, typer.Option(help="Learning rate (DDP, SGD, DANE's local solver).")
    ] = 0.05,
    momentum: Annotated[float, typer.Option(help="Momentum.")] = 0.9,
    eval_every: Annotated[int, typer.Option(help="DDP: steps between evaluations.")] = 50,
    dane_rounds: Annotated[int, typer.Option(help="DANE iterations.")] = 20,
    local_steps: Annotated[int, typer.Option(help="DANE local steps K.")] = 50,
    grad_sample: Annotated[int, typer.Option(help="DANE gradient rows per shard.")] = 1000,
    sgd_rounds: Annotated[int, typer.Option(help="dask-dane synchronous SGD rounds.")] = 200,
    target: Annotated[float, typer.Option(help="Test accuracy to reach.")] = 0.88,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "cpu",
    network: Annotated[
        list[str] | None,
        typer.Option(help="BANDWIDTH_GBPS,LATENCY_MS to project onto (repeatable)."),
    ] = None,
    workdir: Annotated[Path, typer.Option(help="Run directories go here.")] = Path("bench-out/ddp"),
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write the figure here.")] = None,
) -> None:
    """PyTorch DDP against dask-dane's DANE and synchronous SGD on the same shards."""
    from .ddp import DdpSpec
    from .ddp_compare import CompareSpec, run_compare
    from .scaling_report import compare_plot, compare_table

    spec = CompareSpec(
        ddp=DdpSpec(
            store=store,
            model=model,
            workers=workers,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            momentum=momentum,
            eval_every=eval_every,
            seed=seed,
            target=target,
            device=device,
        ),
        dane_rounds=dane_rounds,
        local_steps=local_steps,
        grad_sample=grad_sample,
        sgd_rounds=sgd_rounds,
        workdir=str(workdir),
        networks=_networks(network),
    ).validate()
    _save_bench(run_compare(spec, log=typer.echo), json_out, plot_out, compare_plot, compare_table)


def _networks(given: list[str] | None) -> tuple:
    """--network values, or the two reference networks when none is given."""
    from .network import STANDARD_NETWORKS, parse_network

    return tuple(parse_network(n) for n in given) if given else STANDARD_NETWORKS


def _save_bench(
    result: dict[str, Any],
    json_out: Path | None,
    plot_out: Path | None,
    plot: Any,
    table: Any,
) -> None:
    """Record the command, write the JSON and the PNG if asked, print the table."""
    from .scaling_report import write_json

    result["command"] = "dane " + " ".join(sys.argv[1:])
    if json_out is not None:
        write_json(result, json_out)
    if plot_out is not None:
        plot(result, plot_out)
    typer.echo(table(result))
