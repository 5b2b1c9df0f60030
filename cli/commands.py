"""The `dane` command line: parses options, calls one pipeline or datasets function each.

A command's errors are raised as they are; cli/entry.py's `main` (what `dane` runs) turns
them into one line on stderr and an exit status.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from . import after_run
from . import options as opt
from .advise import advise
from .lazy import LazyCommand, LazyCommands


class _Commands(LazyCommands, TyperGroup):
    """`dane`'s commands; train and bench are built only when named (cli/lazy.py)."""

    order = (
        "prepare", "info", "train", "options", "advise", "evaluate", "predict", "export",
        "report", "presets", "watch",
    )  # fmt: skip

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands under their panels' headings: `bench` apart from the commands a user
        trains with (its rich_help_panel), in plain text as the rest of --help."""
        panels: dict[str, list[tuple[str, Any]]] = {}
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)  # a stand-in stays one: nothing is built
            if command is not None and not command.hidden:
                panel = getattr(command, "rich_help_panel", None) or "Commands"
                panels.setdefault(panel, []).append((name, command))
        width = max((len(name) for rows in panels.values() for name, _ in rows), default=0)
        for title, rows in panels.items():
            with formatter.section(title):
                limit = formatter.width - 6 - width
                formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in rows])


app = typer.Typer(
    cls=_Commands,
    help="Train models with DANE (Distributed Approximate NEwton) on a Dask cluster.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain-text usage errors: one readable line, no box
    epilog=opt.docs("dane"),
)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

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


@app.command(cls=opt.PlainUsage, epilog=opt.docs("prepare"))
def prepare(
    source: opt.Source,
    out: opt.StoreOut,
    shards: opt.Shards = opt.PARTITION.num_shards,
    partition: opt.Partition = opt.PARTITION.kind,
    classes_per_shard: opt.ClassesPerShard = opt.PARTITION.classes_per_shard,
    alpha: opt.Alpha = opt.PARTITION.alpha,
    seed: opt.SplitSeed = opt.PARTITION.seed,
    test_fraction: opt.TestFraction = opt.SOURCE.test_fraction,
    samples: opt.Samples = None,
    image_size: opt.ImageSize = None,
    channels: opt.Channels = None,
    skip_bad: opt.SkipBad = opt.SOURCE.skip_bad,
    path: opt.DataPath = None,
    force: opt.Force = False,
) -> None:
    """Write SOURCE into a sharded zarr store (atomically: complete or not at all)."""
    from ..datasets.partition import PartitionSpec
    from ..pipeline.api_prepare import write_source

    spec = PartitionSpec(
        kind=partition, num_shards=shards, seed=seed, classes_per_shard=classes_per_shard,
        alpha=alpha,
    )  # fmt: skip
    info = write_source(
        source, out, spec, force=force, test_fraction=test_fraction, samples=samples,
        image_size=image_size, channels=channels, seed=seed, skip_bad=skip_bad, path=path,
        skipped=lambda files: typer.echo(files.note(), err=True),
    )  # fmt: skip
    typer.echo(
        f"wrote {out}: {info.num_train} train / {info.num_test} test samples of shape "
        f"{info.sample_shape}, {info.num_shards} shards ({spec.kind})"
    )


@app.command(cls=opt.PlainUsage, epilog=opt.docs("info"))
def info(store: Annotated[str, typer.Argument(help="A store written by `dane prepare`.")]) -> None:
    """Print what a store holds: source, shapes, dtypes, shards and their label histograms."""
    from .store_info import store_lines

    for line in store_lines(store):
        typer.echo(line)


def train(
    *,
    config: opt.ConfigFile = None,
    resume: opt.Resume = False,
    **flags: Any,
) -> None:
    """Train a model with DANE (or SGD / FedAvg) and print the test accuracy.

    The options most runs set; `dane options` lists every one, `dane options --filter TEXT`
    those that mention TEXT.

    Settings for your case, in passes over a shard so they fit any store: `--config
    preset:NAME` (`dane presets` lists them); skewed (non-iid) shards: preset:skewed-shards
    (docs/howto/non-iid.md).
    """
    # flags: one per RunConfig field, by name (None = not given on the command line).
    from ..pipeline import training
    from ..pipeline.engine.run.callbacks import chain
    from ..pipeline.launchers.worker_count import idle_worker_warning
    from ..pipeline.observe.progress import selection_line
    from ..pipeline.observe.tracking import TrackingContext, preset_of, trackers
    from ..pipeline.plan import finished_note, plan_run
    from ..pipeline.setup.run_setup import prepare_run
    from ..pipeline.setup.store_fit import store_fit_notes
    from ..pipeline.trained import export_model
    from .console import TrainingProgress, quiet_cluster_logs
    from .train_lines import (
        EXIT_INTERRUPTED,
        InterruptWatch,
        interrupted_line,
        result_line,
    )

    resolved = plan_run(opt.former_spellings_applied(flags), file=config, resume=resume)
    setup = prepare_run(resolved)  # the run's store, model and strategy, once
    idle = idle_worker_warning(resolved, setup.store.num_shards)  # a warning; jobs refused
    misfits = store_fit_notes(setup)  # settings made for a larger store: what happens instead
    words = {"resume": "--resume", "more_rounds": "--rounds"}
    finished = finished_note(resolved.out, resolved.rounds, **words) if resume else None
    interrupt, bar = InterruptWatch(), TrainingProgress(resolved, setup.strategy, resume=resume)
    try:
        with interrupt, quiet_cluster_logs(Path(resolved.out)), bar:
            for line in (idle, finished, *misfits):
                if line is not None:
                    bar.note(line)
            export = lambda run, out: export_model(run, out, form="state-dict")  # noqa: E731
            tracking = TrackingContext(export, preset_of(config))  # for MLflow
            callbacks = chain(  # the bar and its warnings, then TensorBoard and MLflow
                bar.callbacks(), trackers(resolved, resume=resume, context=tracking)
            )
            summary = training.train(resolved, resume=resume, callbacks=callbacks, setup=setup)
    except BaseException:
        if not interrupt.seen:
            raise
        # Ctrl-C reaches the workers too: what surfaces may be their loss, not the interrupt.
        bar.note(interrupted_line(resolved.out))  # its console: after the bar's last redraw
        raise typer.Exit(EXIT_INTERRUPTED) from None
    typer.echo(selection_line(summary))  # before the result line: scripts read the last line
    typer.echo(result_line(summary, resolved.out))


@app.command("options", cls=opt.PlainUsage, epilog=opt.docs("options"))
def list_options(
    text: Annotated[
        str | None,
        typer.Option(
            "--filter",
            metavar="TEXT",
            help="Only the options whose flag, help or panel holds TEXT (any case; local_lr "
            "finds --local-lr).",
        ),
    ] = None,
) -> None:
    """List every `dane train` option with its panel, default and help: --help shows the
    ones most runs set, and takes the others as well."""
    from .option_list import options_listing

    typer.echo(options_listing(TRAIN.real(), text))


app.command("advise", cls=opt.PlainUsage, epilog=opt.docs("advise"))(advise)


# The commands that read a finished (or running) run, in cli/after_run.py.
app.command(cls=opt.PlainUsage, epilog=opt.docs("evaluate"))(after_run.evaluate)
app.command(cls=opt.PlainUsage, epilog=opt.docs("predict"))(after_run.predict)
app.command(cls=opt.PlainUsage, epilog=opt.docs("export"))(after_run.export)
app.command(cls=opt.PlainUsage, epilog=opt.docs("report"))(after_run.report)
app.command("watch", cls=opt.PlainUsage, epilog=opt.docs("watch"))(after_run.watch_run)


@app.command("presets", cls=opt.PlainUsage, epilog=opt.docs("presets"))
def show_presets(
    path: Annotated[
        str | None, typer.Option("--path", metavar="NAME", help="Print the file of NAME only.")
    ] = None,
    folder: Annotated[bool, typer.Option("--dir", help="Print the presets' folder only.")] = False,
) -> None:
    """List the measured settings shipped with the package (`--config preset:NAME`) and the
    scripts that run whole grids, each with its purpose."""
    from .. import presets

    if folder:
        typer.echo(presets.PRESETS_DIR)
        return
    if path is not None:
        typer.echo(presets.preset_path(path))
        return
    shipped = {p.name: p for p in presets.list_presets()}
    width = max(map(len, shipped))
    recommended = [shipped[name] for name in presets.RECOMMENDED]
    rest = [p for p in shipped.values() if p.name not in presets.RECOMMENDED]
    for title, listed in (
        ("For your case (dane train --config preset:NAME)", recommended),
        ("Benchmark settings, sized for their stores (dane train --config preset:NAME)",
         [p for p in rest if p.kind == "settings"]),
        ("Benchmark runs (dane bench train --config preset:NAME)",
         [p for p in rest if p.kind == "runs"]),
        ("Benchmark grids (bash \"$(dane presets --path NAME)\")",
         [p for p in rest if p.kind == "script"]),
    ):  # fmt: skip
        typer.echo(f"{title}:")
        for preset in listed:
            typer.echo(f"  {preset.name:<{width}}  {preset.purpose}")


# Built when named: train's options import every algorithm, bench every benchmark (torch).
TRAIN = LazyCommand(
    "train", help=inspect.getdoc(train) or "", load=lambda: opt.train_command(train)
)
_Commands.lazy = (
    TRAIN,
    LazyCommand("bench", help=opt.BENCH_HELP, load=opt.bench_group, rich_help_panel="Benchmarks"),
)
