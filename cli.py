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

from .bench.app import bench_app
from .watch import watch

app = typer.Typer(
    help="Train models with DANE (Distributed Approximate NEwton) on a Dask cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain-text usage errors: one readable line, no box
)


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"dask-dane {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Train models with DANE (Distributed Approximate NEwton) on a Dask cluster."""


EXIT_USER_ERROR = 2
EXIT_DIVERGED = 3
EXIT_CLUSTER_LOST = 4


@app.command()
def prepare(
    source: Annotated[
        str,
        typer.Argument(
            help="Data source: digits | synthetic | fashion-mnist | mnist-1d | idx:DIR | npz:FILE "
            "| images:DIR (DIR/<class>/<image>) | cifar10:DIR | cifar100:DIR (python batches)."
        ),
    ],
    out: Annotated[str, typer.Option("--out", help="Store to write: a path or s3://... URL.")],
    shards: Annotated[int, typer.Option(help="Number of training shards.")] = 2,
    partition: Annotated[str, typer.Option(help="iid | label-skew | dirichlet.")] = "iid",
    classes_per_shard: Annotated[int, typer.Option(help="label-skew: classes per shard.")] = 2,
    alpha: Annotated[float, typer.Option(help="dirichlet: concentration (small = skewed).")] = 0.5,
    seed: Annotated[int, typer.Option(help="Seed of the split and the partition.")] = 0,
    test_fraction: Annotated[float, typer.Option(help="Share of samples held out.")] = 0.2,
    samples: Annotated[
        int | None, typer.Option(help="synthetic, mnist-1d: number of samples [2000, 5000].")
    ] = None,
    image_size: Annotated[
        str | None,
        typer.Option(help="synthetic: image side [8]; images: resize to H or HxW pixels."),
    ] = None,
    channels: Annotated[
        int | None, typer.Option(help="images: 1 (grey) or 3 (RGB) [as the files are].")
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option(help="images: skip files Pillow cannot read (and count them).")
    ] = False,
    path: Annotated[
        str | None,
        typer.Option(
            help="fashion-mnist, idx: folder of IDX files "
            "(default /usr/share/datasets/fashion-mnist); npz: the file; images, cifar10, "
            "cifar100: the folder (or write SOURCE:PATH)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing store.")] = False,
) -> None:
    """Write SOURCE into a sharded zarr store (atomically: complete or not at all)."""
    from .datasets import location
    from .datasets.images import image_source_options
    from .datasets.partition import PartitionSpec, validate_partition
    from .datasets.sources import SourceOptions, load_source, parse_source_name
    from .datasets.store import write_store

    kind, _ = parse_source_name(source)  # an unknown source fails before any work
    image_options = image_source_options(kind, image_size=image_size, channels=channels)
    if not 0 < test_fraction < 1:
        raise ValueError(f"--test-fraction must be between 0 and 1 (got {test_fraction})")
    if samples is not None and samples < 2:
        raise ValueError(f"--samples must be at least 2 (got {samples})")
    if location.exists(location.resolve(out)) and not force:  # before any data is loaded
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
        seed=seed,
        samples=samples,
        test_fraction=test_fraction,
        skip_bad=skip_bad,
        **image_options,
        path=path,
    )
    raw = load_source(source, options)
    if "skipped_files" in raw.attrs:
        typer.echo(f"skipped {raw.attrs['skipped_files']} file(s) Pillow cannot read", err=True)
    info = write_store(raw, spec, out, force=force)
    typer.echo(
        f"wrote {out}: {info.num_train} train / {info.num_test} test samples of shape "
        f"{info.sample_shape}, {info.num_shards} shards ({spec.kind})"
    )


@app.command()
def info(store: Annotated[str, typer.Argument(help="A store written by `dane prepare`.")]) -> None:
    """Print what a store holds: source, shapes, dtypes, shards and their label histograms."""
    from .datasets.images import format_class_names, read_class_names
    from .datasets.store import label_histograms, labels_no_shard_holds, open_store

    meta = open_store(store)
    typer.echo(f"store:          {meta.path}")
    typer.echo(f"source:         {meta.source}")
    typer.echo(f"task:           {meta.task} ({meta.num_classes} classes)")
    if (class_names := read_class_names(meta.path)) is not None:
        typer.echo(f"class names:    {format_class_names(class_names)}")
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
    if histograms is not None:
        missing = labels_no_shard_holds(histograms)
        typer.echo(
            "labels no shard holds: "
            + (" ".join(map(str, missing)) + "  (never trained on)" if missing else "none")
        )


@app.command()
def train(
    store: Annotated[
        str | None, typer.Argument(help="Store to train on (default: embedded digits).")
    ] = None,
    out: Annotated[str | None, typer.Option(help="Run directory [runs/latest].")] = None,
    algorithm: Annotated[
        str | None,
        typer.Option(
            help="dane | sdane | sdane-adaptive | sgd | fedavg | fedprox | feddyn (skewed "
            "shards: DANE's tilt kept per shard, --mu alpha) | scaffold | one-shot | admm | gd | "
            "agd [dane]."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="A built-in name: small-cnn | lenet | compact-cnn | cnn1d | resnet8 | mlp | "
            "linear | logistic [small-cnn]; or your own: FILE.py:NAME or package.module:NAME, "
            "a callable returning an nn.Module, called with whichever of sample_shape, "
            "in_channels, num_classes it names (torchvision.models:resnet18 works as it is)."
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Workers of a started cluster [2].")] = None,
    threads_per_worker: Annotated[int | None, typer.Option(help="Threads per worker [1].")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds (DANE iterations) [20].")] = None,
    eta: Annotated[
        float | None, typer.Option(help="DANE: step on the global gradient [1].")
    ] = None,
    mu: Annotated[
        float | None,
        typer.Option(help="Proximal strength (dane, fedprox; sdane lam, feddyn alpha: > 0) [0]."),
    ] = None,
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
    grad_sample_growth: Annotated[
        float | None, typer.Option(help="DANE: grow the gradient sample by this per round [1].")
    ] = None,
    local_theta: Annotated[
        float | None,
        typer.Option(help="DANE: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K [0]."),
    ] = None,
    server_momentum: Annotated[
        float | None, typer.Option(help="dane/fedavg/fedprox: momentum on the averaged step [0].")
    ] = None,
    trust_radius: Annotated[
        float | None,
        typer.Option(help="Skewed shards (dane, feddyn): steps within ||v - w|| <= R [0: off]."),
    ] = None,
    line_search: Annotated[
        int | None,
        typer.Option(help="DANE, skewed shards: best of N steps 2, 1, 1/2.. on the loss [0: off]."),
    ] = None,
    lr_schedule: Annotated[
        str | None, typer.Option(help="--local-lr across rounds: constant | cosine | step.")
    ] = None,
    local_clip: Annotated[
        float | None, typer.Option(help="Skewed shards: clip local step gradients to this norm.")
    ] = None,
    augment: Annotated[
        str | None,
        typer.Option(
            help="Images: random flips and crops of each local minibatch: flip | "
            "crop=P | flip,crop=P (pad P, crop back) [none]."
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of init and sampling [0].")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32 | float64 [float32].")] = None,
    device: Annotated[
        str | None,
        typer.Option(help="auto (a GPU where a worker sees one) | cpu | cuda [auto]."),
    ] = None,
    eval_every: Annotated[int | None, typer.Option(help="Evaluate every N rounds [1].")] = None,
    stop_at_accuracy: Annotated[
        float | None, typer.Option(help="Stop once test accuracy reaches this; 0: never [0].")
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option(help="Address of a running Dask scheduler to use.")
    ] = None,
    scheduler_file: Annotated[
        str | None, typer.Option(help="A running scheduler's `--scheduler-file` (jobqueue).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Interface a started cluster binds.")] = None,
    broadcast: Annotated[
        str | None, typer.Option(help="direct | tree | auto (tree from 8 workers) [auto].")
    ] = None,
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
    """Train a model with DANE (or SGD / FedAvg) and print the test accuracy.

    Skewed (non-iid) shards: --algorithm feddyn --mu 0.01 --local-clip 1, the settings of
    bench/presets/skew-dane.toml (README, "Non-iid data").
    """
    # First statement: the options given, by name (None = not given on the command line).
    flags = {k: v for k, v in locals().items() if k not in ("config", "resume")}
    from .console import TrainingProgress, quiet_cluster_logs
    from .pipeline.config import check_settings, resolve_config
    from .pipeline.loop import train as run_training
    from .pipeline.run_setup import ensure_default_store
    from .pipeline.rundir import RunDir, check_same_run

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
    with quiet_cluster_logs(Path(resolved.out)), TrainingProgress(resolved.rounds) as progress:
        summary = run_training(resolved, resume=resume, callbacks=progress.callbacks())
    accuracy = summary["final_test_accuracy"]
    typer.echo(
        f"{summary['algorithm']}: {summary['rounds']} rounds, test accuracy "
        f"{accuracy:.4f}, {summary['total_wall_s']:.1f} s in rounds; run in {resolved.out}"
        if accuracy is not None
        else f"{summary['algorithm']}: {summary['rounds']} rounds; run in {resolved.out}"
    )


@app.command()
def evaluate(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `dane train`.")],
    best: Annotated[bool, typer.Option(help="Use the best checkpoint, not the latest.")] = False,
) -> None:
    """Print loss and accuracy of a run's checkpoint on its store's test split."""
    from .pipeline.config import RunConfig
    from .pipeline.evaluation import evaluate_checkpoint
    from .pipeline.rundir import RunDir

    run = RunDir(run_dir)
    config = RunConfig(**run.saved_config()).validate()
    checkpoint = run.best if best else run.latest
    round_index, metrics = evaluate_checkpoint(config, checkpoint)
    line = f"{checkpoint.name} (round {round_index}): test loss {metrics['loss']:.4f}"
    if "accuracy" in metrics:
        line += f", test accuracy {metrics['accuracy']:.4f}"
    typer.echo(line)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `dane train`.")],
    out: Annotated[Path, typer.Option("--out", help="The file to write (.pt2 or .pt).")],
    best: Annotated[bool, typer.Option(help="Export the best checkpoint, not the latest.")] = False,
    format: Annotated[
        str,
        typer.Option(
            help="program: a torch.export program (torch.export.load(FILE).module(), no "
            "dask-dane needed; takes the samples as the store holds them, as float32) | "
            "state-dict: the module's state_dict with the normalisation beside it."
        ),
    ] = "program",
    force: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Write a trained model to a file that plain PyTorch loads."""
    from .pipeline.trained import export_model

    if out.exists() and not force:
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    written = export_model(run_dir, out, best=best, form=format)
    typer.echo(f"wrote {written} ({format})")


@app.command()
def report(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Run directories written by `dane train`.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder for the PNG files.")],
) -> None:
    """Plot test accuracy and training loss of runs against round, communication and time."""
    from .pipeline.report import write_report

    for path in write_report(list(run_dirs), out):
        typer.echo(f"wrote {path}")


@app.command("presets")
def show_presets(
    path: Annotated[
        str | None, typer.Option("--path", metavar="NAME", help="Print the file of NAME only.")
    ] = None,
    folder: Annotated[bool, typer.Option("--dir", help="Print the presets' folder only.")] = False,
) -> None:
    """List the measured settings shipped with the package (`--config preset:NAME`) and the
    scripts that run whole grids, each with its purpose."""
    from .pipeline import presets

    if folder:
        typer.echo(presets.PRESETS_DIR)
        return
    if path is not None:
        typer.echo(presets.preset_path(path))
        return
    shipped = presets.list_presets()
    width = max(len(p.name) for p in shipped)
    for kind, title in (("settings", "dane train --config preset:NAME"),
                        ("runs", "dane bench train --configs preset:NAME"),
                        ("script", "bash \"$(dane presets --path NAME)\"")):  # fmt: skip
        typer.echo(f"{title}:")
        for preset in (p for p in shipped if p.kind == kind):
            typer.echo(f"  {preset.name:<{width}}  {preset.purpose}")


app.add_typer(bench_app, name="bench")


@app.command("watch")
def watch_run(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (its metrics.jsonl).")],
    interval: Annotated[float, typer.Option(help="Seconds between reads of it [1].")] = 1.0,
) -> None:
    """Follow a run started elsewhere, live (round, loss and accuracy sparklines, bytes, the
    slowest worker); exits when the run ends."""
    if not interval > 0:
        raise ValueError(f"--interval must be a positive number of seconds (got {interval})")
    watch(run_dir, interval)


def main() -> None:
    """Console-script entry: errors become one line on stderr and an exit status (see top)."""
    from .pipeline.errors import ClusterLost, TrainingDiverged

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
