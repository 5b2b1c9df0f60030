"""The options of `dane prepare` and `dane train`, declared apart from the commands.

Every setting is declared once, where it lives, with its default and its help text: `dane
train` takes one option per RunConfig field, named after it, with that field's help and
default (pipeline/setup/settings.py and the algorithms' declarations), listed under its
section. `dane prepare`'s defaults are those of PartitionSpec and SourceOptions.
`train_command` and `bench_group` build the two commands cli/lazy.py defers (and bench's
own commands are deferred in turn, BenchCommands). Generating
train's options imports every algorithm's declarations but not torch (they import it where
they compute), so `dane train --help` answers in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from .. import bench
from ..bench.app import COMMANDS as BENCH_COMMANDS
from ..bench.app import load as load_bench_command
from ..datasets.builtin import MNIST1D_SAMPLES, SYNTHETIC_SAMPLES
from ..datasets.idx import FASHION_MNIST_DIR
from ..datasets.partition import PartitionSpec
from ..datasets.raw import SourceOptions
from .lazy import LazyCommand, LazyCommands
from .option_list import FORMER, SHOWN, shown_first

ARGUMENTS = ("store",)  # fields given by position rather than as --flags
# The page of the documentation (docs/, `make docs` builds the site) that each command's
# --help ends with; `dane bench` and its commands share the benchmarks' page.
DOCS = {
    "dane": "docs/index.md",
    "prepare": "docs/howto/own-images.md",
    "info": "docs/reference/formats.md",
    "train": "docs/tutorials/quickstart.md",
    "options": "docs/reference/settings.md",
    "advise": "docs/howto/workers.md",
    "evaluate": "docs/reference/formats.md",
    "predict": "docs/howto/own-model.md",
    "export": "docs/howto/own-model.md",
    "report": "docs/howto/tracking.md",
    "presets": "docs/reference/settings.md",
    "watch": "docs/howto/tracking.md",
    "bench": "docs/results/running.md",
}


def docs(command: str) -> str:
    """The line a command's --help ends with: its page, and the command line reference."""
    return f"Docs: {DOCS[command]}, and every option in docs/reference/cli.md."


# `dane train`'s own options, beside RunConfig's.
# train's own two options stand with the run's settings in its --help (config.PANELS).
RUN_PANEL = "Run and output"
ConfigFile = Annotated[
    Path | None,
    typer.Option(
        help="TOML file of settings, each key a flag without its dashes (local_lr = 0.05); "
        "flags override it.",
        rich_help_panel=RUN_PANEL,
    ),
]
# A plain flag, its default unshown: every other option shows its default as [value].
Resume = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Continue the run in --out (without --out: the newest run under runs/).",
        show_default=False,
        rich_help_panel=RUN_PANEL,
    ),
]


def run_config_parameters() -> list[inspect.Parameter]:
    """One parameter per RunConfig field, section by section; None (not given) as the
    value, so that a config file's setting stands unless the flag is passed."""
    # Imported here, not above: the declarations import every algorithm module, which
    # `dane --help` (and every command but train) need not wait for (cli/lazy.py).
    from ..pipeline.algorithms.parts.hyperparameters import with_default
    from ..pipeline.algorithms.parts.setting_error import RENAMED_FLAGS, flag, former_flag
    from ..pipeline.setup.config import SECTIONS, VALUE_TYPES, panel_of

    parameters = []
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            text = with_default(f.metadata.get("declaration").help, f.default)
            if f.name in ARGUMENTS:
                info = typer.Argument(help=text)
            else:  # hidden from --help unless SHOWN; `dane options` lists every one
                panel, hidden = panel_of(f.name), f.name not in SHOWN
                info = typer.Option(flag(f.name), help=text, rich_help_panel=panel, hidden=hidden)
            kind = VALUE_TYPES[f.name] | None
            parameters.append(_keyword(f.name, Annotated[kind, info]))
            if f.name in RENAMED_FLAGS:  # the former spelling still parses, hidden from --help
                hidden = typer.Option(former_flag(f.name), hidden=True)
                parameters.append(_keyword(f.name + FORMER, Annotated[kind, hidden]))
    return parameters


def former_spellings_applied(flags: dict[str, Any]) -> dict[str, Any]:
    """`flags` with each former spelling (--lr-schedule) read as its field (lr_schedule)."""
    from ..pipeline.algorithms.parts.setting_error import flag, former_flag

    flags = dict(flags)
    for key in [k for k in flags if k.endswith(FORMER)]:
        name, value = key.removesuffix(FORMER), flags.pop(key)
        if value is None:
            continue
        if flags.get(name) is not None:
            raise ValueError(f"{former_flag(name)} is {flag(name)}'s former name: give one")
        flags[name] = value
    return flags


def _keyword(name: str, annotation: Any) -> inspect.Parameter:
    """A keyword parameter that is None unless its flag is given."""
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def train_command(train: Callable[..., Any]) -> click.Command:
    """`dane train` as Typer builds it: `train` (taking `**flags`) with one option per
    RunConfig field, before its own."""
    own = inspect.signature(train, eval_str=True).parameters.values()
    kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    train.__signature__ = inspect.Signature([*run_config_parameters(), *kept])  # type: ignore[attr-defined]
    return _mounted(
        lambda parent: parent.command("train", cls=PanelledCommand, epilog=docs("train"))(train)
    )


class PlainUsage(typer.core.TyperCommand):
    """A command whose usage line names its arguments as people write them in docs, upper
    case and bare (`dane report [OPTIONS] RUN_DIR...`), where Typer writes `{run_dirs}...`."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue  # options are [OPTIONS]
            name = (param.metavar or param.name or "").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name + ("..." if param.nargs != 1 else ""))
        return pieces


class PanelledCommand(PlainUsage):
    """A command whose plain --help lists its options in panels (config.PANELS' order), as
    Typer's rich help would, without rich's formatting or its import; only SHOWN's, the rest
    being listed apart, by `dane options` (option_list.py)."""

    listed_apart = True  # its hidden options are settings, not aliases (option_list.every_record)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..pipeline.setup.config import PANELS

        arguments, panels = [], {name: [] for name in PANELS}  # type: ignore[var-annotated]
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:  # --help has no panel: it closes the list
                panel = getattr(param, "rich_help_panel", None) or "Options"
                panels.setdefault(panel, []).append((param.name, record))
        listed = [(title, shown_first(pairs)) for title, pairs in panels.items()]
        for title, records in [("Arguments", arguments), *listed]:
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


def _bench_command(name: str) -> click.Command:
    """`dane bench NAME` as Typer builds it, from its benchmark's cli.py."""
    command = load_bench_command(name)
    return _mounted(lambda parent: parent.command(name, epilog=docs("bench"))(command))


BENCH_HELP = bench.BENCH_HELP  # declared beside the benchmarks, read without importing them


class BenchCommands(LazyCommands, TyperGroup):
    """`dane bench`'s commands, listed from bench/app.py's names and docstrings' first lines;
    each is built (its benchmark, torch and the engine imported) only when named."""

    lazy = tuple(
        LazyCommand(name, help=line, load=functools.partial(_bench_command, name))
        for name, (_, line) in BENCH_COMMANDS.items()
    )


def bench_group() -> click.Command:
    """`dane bench`: every benchmark's commands (bench/app.py), none of them built yet."""
    group = typer.Typer(
        cls=BenchCommands, help=BENCH_HELP, no_args_is_help=True, epilog=docs("bench")
    )
    return _mounted(lambda parent: parent.add_typer(group, name="bench"))


def _mounted(mount: Callable[[typer.Typer], object]) -> click.Command:
    """A command as Typer builds it under `dane`'s settings (plain help, no completion)."""
    parent = typer.Typer(rich_markup_mode=None, add_completion=False)
    parent.callback()(lambda: None)  # a group even with one command: its commands inherit
    mount(parent)
    group = typer.main.get_command(parent)
    return next(iter(group.commands.values()))  # type: ignore[attr-defined]


# `dane prepare`: defaults from the partition's and the sources' dataclasses.
PARTITION = PartitionSpec()
SOURCE = SourceOptions()

Source = Annotated[
    str,
    typer.Argument(
        help="Data source: digits | synthetic | fashion-mnist | mnist-1d | idx:DIR | npz:FILE "
        "| images:DIR (DIR/<class>/<image>) | cifar10:DIR | cifar100:DIR (python batches); "
        "tabular, for the convex experiments: synthetic-ridge | digits-tabular."
    ),
]
StoreOut = Annotated[str, typer.Option("--out", help="Store to write: a path or s3://... URL.")]
Shards = Annotated[int, typer.Option(help="Number of training shards.")]
Partition = Annotated[str, typer.Option(help="iid | label-skew | dirichlet.")]
ClassesPerShard = Annotated[int, typer.Option(help="label-skew: classes per shard.")]
Alpha = Annotated[float, typer.Option(help="dirichlet: concentration (small = skewed).")]
SplitSeed = Annotated[int, typer.Option(help="Seed of the split and the partition.")]
TestFraction = Annotated[float, typer.Option(help="Share of samples held out.")]
Samples = Annotated[
    int | None,
    typer.Option(
        help=f"synthetic, mnist-1d: number of samples [{SYNTHETIC_SAMPLES}, {MNIST1D_SAMPLES}]."
    ),
]
ImageSize = Annotated[
    str | None,
    typer.Option(
        help=f"synthetic: image side [{SOURCE.image_size}]; images: resize to H or HxW pixels."
    ),
]
Channels = Annotated[
    int | None, typer.Option(help="images: 1 (grey) or 3 (RGB) [as the files are].")
]
SkipBad = Annotated[
    bool, typer.Option(help="images: skip files Pillow cannot read (and count them).")
]
DataPath = Annotated[
    str | None,
    typer.Option(
        help="fashion-mnist, idx: folder of IDX files "
        f"(default {FASHION_MNIST_DIR}); npz: the file; images, cifar10, "
        "cifar100: the folder (or write SOURCE:PATH)."
    ),
]
Force = Annotated[bool, typer.Option(help="Replace an existing store.")]
