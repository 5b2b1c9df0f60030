"""The options of `dane prepare` and `dane train`, declared apart from the commands.

Every setting is declared once, where it lives, with its default and its help text: `dane
train` takes one option per RunConfig field, named after it, with that field's help and
default (pipeline/setup/settings.py and the algorithms' declarations), listed under its
section. `dane prepare`'s defaults are those of PartitionSpec and SourceOptions.
`train_command` and `bench_group` build the two commands cli/lazy.py defers: generating
train's options imports torch, which only train itself and its --help wait for.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from .. import bench
from ..datasets.builtin import MNIST1D_SAMPLES, SYNTHETIC_SAMPLES
from ..datasets.idx import FASHION_MNIST_DIR
from ..datasets.partition import PartitionSpec
from ..datasets.raw import SourceOptions

ARGUMENTS = ("store",)  # fields given by position rather than as --flags
# `dane train`'s own options, beside RunConfig's.
ConfigFile = Annotated[Path | None, typer.Option(help="TOML file of settings; flags override it.")]
Resume = Annotated[bool, typer.Option(help="Continue the run in --out.")]


def run_config_parameters() -> list[inspect.Parameter]:
    """One parameter per RunConfig field, section by section; None (not given) as the
    value, so that a config file's setting stands unless the flag is passed."""
    # Imported here, not above: the declarations import torch, which `dane --help` (and
    # every command but train) must not wait for (cli/lazy.py).
    from ..pipeline.algorithms.parts.hyperparameters import with_default
    from ..pipeline.setup.config import SECTIONS, RunConfig

    types = typing.get_type_hints(RunConfig)
    parameters = []
    for cls in SECTIONS.values():
        for f in dataclasses.fields(cls):
            kind = typer.Argument if f.name in ARGUMENTS else typer.Option
            text = with_default(f.metadata.get("declaration").help, f.default)
            info = kind(help=text)
            annotation = Annotated[_without_none(types[f.name]) | None, info]
            parameters.append(
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
                )
            )
    return parameters


def run_config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` (taking `**flags`) as Typer sees it: RunConfig's options before its own."""
    own = inspect.signature(command, eval_str=True).parameters.values()
    kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature([*run_config_parameters(), *kept])  # type: ignore[attr-defined]
    return command


def train_command(train: Callable[..., Any]) -> click.Command:
    """`dane train` as Typer builds it: `train` with one option per RunConfig field."""
    return _mounted(lambda parent: parent.command("train")(run_config_options(train)))


BENCH_HELP = bench.BENCH_HELP  # declared beside the benchmarks, read without importing them


def bench_group() -> click.Command:
    """`dane bench`: every benchmark's commands (bench/app.py)."""
    from ..bench.app import bench_app

    return _mounted(lambda parent: parent.add_typer(bench_app, name="bench"))


def _mounted(mount: Callable[[typer.Typer], object]) -> click.Command:
    """A command as Typer builds it under `dane`'s settings (plain help, no completion)."""
    parent = typer.Typer(rich_markup_mode=None, add_completion=False)
    parent.callback()(lambda: None)  # a group even with one command: its commands inherit
    mount(parent)
    group = typer.main.get_command(parent)
    return next(iter(group.commands.values()))  # type: ignore[attr-defined]


def _without_none(annotation: Any) -> type:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


# `dane prepare`: defaults from the partition's and the sources' dataclasses.
PARTITION = PartitionSpec()
SOURCE = SourceOptions()

Source = Annotated[
    str,
    typer.Argument(
        help="Data source: digits | synthetic | fashion-mnist | mnist-1d | idx:DIR | npz:FILE "
        "| images:DIR (DIR/<class>/<image>) | cifar10:DIR | cifar100:DIR (python batches)."
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
