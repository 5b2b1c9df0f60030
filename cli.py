"""The `dane` command line: parses options, calls one pipeline or datasets function each.

Errors print one line on stderr, without a traceback, and exit with a status that says
what went wrong:
  0  done;
  2  bad input (store, settings, config file, paths, an unreachable --scheduler): the line
     names the problem and the fix, and nothing was written;
  3  training diverged (loss or weights not finite): the line names the round and suggests a
     larger --mu or a smaller --local-lr; the last good checkpoint is kept;
  4  the cluster was lost (the scheduler stopped answering within --timeout, or a round kept
     failing as workers died): the run directory stays resumable with --resume.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Train models with DANE (Distributed Approximate NEwton) on a Dask cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain-text usage errors: one readable line, no box
)

EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3
EXIT_CLUSTER_LOST = 4


@app.command()
def prepare(
    source: Annotated[
        str,
        typer.Argument(
            help="Data source: digits | synthetic | fashion-mnist | mnist-1d | idx:DIR | npz:FILE."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Path of the zarr store to write.")],
    shards: Annotated[int, typer.Option(help="Number of training shards.")] = 2,
    partition: Annotated[str, typer.Option(help="iid | label-skew | dirichlet.")] = "iid",
    classes_per_shard: Annotated[int, typer.Option(help="label-skew: classes per shard.")] = 2,
    alpha: Annotated[float, typer.Option(help="dirichlet: concentration (small = skewed).")] = 0.5,
    seed: Annotated[int, typer.Option(help="Seed of the split and the partition.")] = 0,
    test_fraction: Annotated[float, typer.Option(help="Share of samples held out.")] = 0.2,
    samples: Annotated[
        int | None, typer.Option(help="synthetic, mnist-1d: number of samples [2000, 5000].")
    ] = None,
    image_size: Annotated[int, typer.Option(help="synthetic: image side in pixels.")] = 8,
    path: Annotated[
        str | None,
        typer.Option(
            help="fashion-mnist, idx: folder of IDX files "
            "(default /usr/share/datasets/fashion-mnist); npz: the file."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing store.")] = False,
) -> None:
    """Write SOURCE into a sharded zarr store (atomically: complete or not at all)."""
    from dask_dane.datasets.partition import PartitionSpec, validate_partition
    from dask_dane.datasets.sources import SourceOptions, load_source, parse_source_name
    from dask_dane.datasets.store import write_store

    parse_source_name(source)  # an unknown source fails before any work
    if not 0 < test_fraction < 1:
        raise ValueError(f"--test-fraction must be between 0 and 1 (got {test_fraction})")
    if samples is not None and samples < 2:
        raise ValueError(f"--samples must be at least 2 (got {samples})")
    if image_size < 1:
        raise ValueError(f"--image-size must be at least 1 (got {image_size})")
    if out.exists() and not force:
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    spec = PartitionSpec(
        kind=partition,
        num_shards=shards,
        seed=seed,
        classes_per_shard=classes_per_shard,
        alpha=alpha,
    )
    validate_partition(spec, num_samples=max(shards, 1), num_classes=10)
    options = SourceOptions(
        seed=seed, samples=samples, test_fraction=test_fraction, image_size=image_size, path=path
    )
    info = write_store(load_source(source, options), spec, out, force=force)
    typer.echo(
        f"wrote {out}: {info.num_train} train / {info.num_test} test samples of shape "
        f"{info.sample_shape}, {info.num_shards} shards ({spec.kind})"
    )


@app.command()
def info(store: Annotated[Path, typer.Argument(help="A store written by `dane prepare`.")]) -> None:
    """Print what a store holds: source, shapes, dtypes, shards and their label histograms."""
    from dask_dane.datasets.store import label_histograms, open_store

    meta = open_store(store)
    typer.echo(f"store:          {meta.path}")
    typer.echo(f"source:         {meta.source}")
    typer.echo(f"task:           {meta.task} ({meta.num_classes} classes)")
    typer.echo(
        f"train:          x {(meta.num_train, *meta.sample_shape)} {meta.x_dtype}, "
        f"y ({meta.num_train},) {meta.y_dtype}"
    )
    typer.echo(
        f"test:           x {(meta.num_test, *meta.sample_shape)} {meta.x_dtype}, "
        f"y ({meta.num_test},) {meta.y_dtype}"
    )
    typer.echo(f"partition:      {meta.partition}")
    typer.echo(f"shards:         {meta.num_shards}")
    histograms = label_histograms(meta) if meta.task == "classification" else None
    for i, (start, stop) in enumerate(meta.shards):
        line = f"  shard {i:>3}: rows [{start}, {stop})  {stop - start} samples"
        if histograms is not None:
            line += "  labels " + " ".join(str(int(c)) for c in histograms[i])
        typer.echo(line)


@app.command()
def train(
    store: Annotated[
        str | None, typer.Argument(help="Store to train on (default: embedded digits).")
    ] = None,
    out: Annotated[str | None, typer.Option(help="Run directory [runs/latest].")] = None,
    algorithm: Annotated[
        str | None,
        typer.Option(help="dane | sgd | fedavg | fedprox | one-shot | admm | gd | agd [dane]."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="small-cnn | lenet | cnn1d | resnet8 | mlp | linear | logistic [small-cnn]."
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Workers of a started cluster [2].")] = None,
    threads_per_worker: Annotated[int | None, typer.Option(help="Threads per worker [1].")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds (DANE iterations) [20].")] = None,
    eta: Annotated[
        float | None, typer.Option(help="DANE: step on the global gradient [1].")
    ] = None,
    mu: Annotated[float | None, typer.Option(help="DANE: proximal strength [0].")] = None,
    local_steps: Annotated[int | None, typer.Option(help="Local solver steps K [30].")] = None,
    local_lr: Annotated[
        float | None, typer.Option(help="Learning rate, gd/agd step [0.05].")
    ] = None,
    local_optimizer: Annotated[str | None, typer.Option(help="sgd | adam [sgd].")] = None,
    local_solver: Annotated[
        str | None,
        typer.Option(help="steps (K steps, the default) | lbfgs | cg (exact; convex models)."),
    ] = None,
    local_tol: Annotated[
        float | None, typer.Option(help="lbfgs/cg: relative gradient-norm tolerance [1e-10].")
    ] = None,
    rho: Annotated[float | None, typer.Option(help="admm: consensus penalty [1].")] = None,
    l2: Annotated[
        float | None, typer.Option(help="L2 penalty lambda (default: the store's l2, else 0).")
    ] = None,
    momentum: Annotated[float | None, typer.Option(help="SGD momentum (agd: beta) [0.9].")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Minibatch size per shard [32].")] = None,
    safeguard: Annotated[
        str | None,
        typer.Option(help="DANE: off | backtrack | adaptive-mu (halve rejected steps) [off]."),
    ] = None,
    grad_sample: Annotated[
        int | None,
        typer.Option(help="DANE: rows per shard for the gradient, fixed per run; 0: all [0]."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of init and sampling [0].")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 | float64 [float32].")] = None,
    device: Annotated[
        str | None,
        typer.Option(help="auto (a GPU where a worker sees one) | cpu | cuda [auto]."),
    ] = None,
    eval_every: Annotated[int | None, typer.Option(help="Evaluate every N rounds [1].")] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="Address of a running Dask scheduler to use.")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Interface a started cluster binds.")] = None,
    dashboard_address: Annotated[
        str | None, typer.Option(help="Dashboard address [127.0.0.1:8787].")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds to wait for a cluster, or a silent scheduler, before stopping [60]."
        ),
    ] = None,
    tls_ca_file: Annotated[
        str | None, typer.Option(help="--scheduler tls://...: CA certificate (PEM).")
    ] = None,
    tls_cert: Annotated[
        str | None, typer.Option(help="--scheduler tls://...: client certificate (PEM).")
    ] = None,
    tls_key: Annotated[
        str | None, typer.Option(help="--scheduler tls://...: client private key (PEM).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="TOML file of settings; flags override it.")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue the run in --out.")] = False,
) -> None:
    """Train a model with DANE (or SGD / FedAvg) and print the test accuracy."""
    # First statement: the options given, by name (None = not given on the command line).
    flags = {k: v for k, v in locals().items() if k not in ("config", "resume")}
    from dask_dane.pipeline.config import check_settings, resolve_config
    from dask_dane.pipeline.loop import train as run_training
    from dask_dane.pipeline.rundir import RunDir, check_same_run
    from dask_dane.pipeline.setup import ensure_default_store

    base: dict[str, Any] = {}
    if resume:
        out_dir = flags["out"] or resolve_config(file=config, flags={}).out
        base = RunDir(Path(out_dir)).saved_config()
        check_settings(base, "config.toml")
    resolved = resolve_config(file=config, flags=flags, base=base)
    if resolved.store is None:
        resolved = resolve_config(
            file=config, flags={**flags, "store": str(ensure_default_store(resolved))}, base=base
        )
    if resume:
        check_same_run(base, resolved)
    with _TrainingProgress(resolved.rounds) as progress:
        summary = run_training(resolved, resume=resume, callbacks=progress.callbacks())
    accuracy = summary["final_test_accuracy"]
    typer.echo(
        f"{summary['algorithm']}: {summary['rounds']} rounds, test accuracy "
        f"{accuracy:.4f}, {summary['total_wall_s']:.1f} s in rounds; run in {resolved.out}"
        if accuracy is not None
        else f"{summary['algorithm']}: {summary['rounds']} rounds; run in {resolved.out}"
    )


class _TrainingProgress:
    """A rich progress bar: round, train loss, test accuracy, ETA."""

    def __init__(self, rounds: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task = self.bar.add_task("train", total=rounds, loss="-", acc="-")

    def __enter__(self) -> _TrainingProgress:
        return self  # the bar starts with the first round: errors before it print alone

    def __exit__(self, *exc: object) -> None:
        if self.bar.live.is_started:  # stop() of a bar never started prints an empty line
            self.bar.stop()

    def callbacks(self):  # type: ignore[no-untyped-def]
        from dask_dane.pipeline.loop import Callbacks

        def on_start(dashboard: str, workers: int) -> None:
            self.console.print(f"dashboard: {dashboard}  ({workers} workers)")
            self.bar.start()

        def on_round(row: dict[str, Any]) -> None:
            loss = row["train_loss"]
            acc = row["test_accuracy"]
            self.bar.update(
                self.task,
                completed=row["round"],
                loss=f"{loss:.4f}" if loss is not None else "-",
                acc=f"{acc:.4f}" if acc is not None else "-",
            )

        return Callbacks(on_start=on_start, on_round=on_round)


@app.command()
def evaluate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `dane train`.")],
    best: Annotated[bool, typer.Option(help="Use the best checkpoint, not the latest.")] = False,
) -> None:
    """Print loss and accuracy of a run's checkpoint on its store's test split."""
    from dask_dane.pipeline.config import RunConfig
    from dask_dane.pipeline.evaluation import evaluate_checkpoint
    from dask_dane.pipeline.rundir import RunDir

    run = RunDir(run_dir)
    config = RunConfig(**run.saved_config()).validate()
    checkpoint = run.best if best else run.latest
    round_index, metrics = evaluate_checkpoint(config, checkpoint)
    line = f"{checkpoint.name} (round {round_index}): test loss {metrics['loss']:.4f}"
    if "accuracy" in metrics:
        line += f", test accuracy {metrics['accuracy']:.4f}"
    typer.echo(line)


@app.command()
def report(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories written by `dane train`.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder for the PNG files.")],
) -> None:
    """Plot test accuracy and training loss of runs against round, communication and time."""
    from dask_dane.pipeline.report import write_report

    for path in write_report(list(run_dirs), out):
        typer.echo(f"wrote {path}")


bench_app = typer.Typer(
    help="Benchmarks through the Dask pipeline (one cluster reused for every run).",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")


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
    from dask_dane.pipeline.benchmarks.convergence import (
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
    from dask_dane.pipeline.benchmarks.training import read_runs, run_all

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
    from dask_dane.pipeline.benchmarks.soak import SoakSpec, markdown_table, run_soak, write_json

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
    from dask_dane.pipeline.benchmarks.scaling import ScalingSpec, run_scaling
    from dask_dane.pipeline.benchmarks.scaling_report import markdown_table, plot

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
    from dask_dane.pipeline.benchmarks.ddp import DdpSpec
    from dask_dane.pipeline.benchmarks.ddp_compare import CompareSpec, run_compare
    from dask_dane.pipeline.benchmarks.scaling_report import compare_plot, compare_table

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
    from dask_dane.pipeline.benchmarks.network import STANDARD_NETWORKS, parse_network

    return tuple(parse_network(n) for n in given) if given else STANDARD_NETWORKS


def _save_bench(
    result: dict[str, Any],
    json_out: Path | None,
    plot_out: Path | None,
    plot: Any,
    table: Any,
) -> None:
    """Record the command, write the JSON and the PNG if asked, print the table."""
    from dask_dane.pipeline.benchmarks.scaling_report import write_json

    result["command"] = "dane " + " ".join(sys.argv[1:])
    if json_out is not None:
        write_json(result, json_out)
    if plot_out is not None:
        plot(result, plot_out)
    typer.echo(table(result))


def main() -> None:
    """Console-script entry: errors become one line on stderr and an exit status (see top)."""
    from dask_dane.pipeline.errors import ClusterLost, TrainingDiverged

    try:
        app(standalone_mode=True)
    except TrainingDiverged as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_DIVERGED)
    except ClusterLost as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_CLUSTER_LOST)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
