"""The options of `dane prepare` and `dane train`, declared apart from the commands.

Every default is stated once, where the setting lives: `dane train` takes one option per
RunConfig field, named after it, and its help shows that field's default
(pipeline/setup/settings.py); only the help texts are written here. `dane prepare`'s
defaults are those of PartitionSpec and SourceOptions.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from ..datasets.builtin import MNIST1D_SAMPLES, SYNTHETIC_SAMPLES
from ..datasets.idx import FASHION_MNIST_DIR
from ..datasets.partition import PartitionSpec
from ..datasets.raw import SourceOptions
from ..pipeline.round.topology import TREE_FROM_WORKERS
from ..pipeline.setup.config import RunConfig

# `dane train`: a help text per RunConfig field, in the order --help lists them. The field's
# default is appended in brackets (None: none shown, the text says what happens instead).
TRAIN_HELP: dict[str, str] = {
    "store": "Store to train on (default: embedded digits).",
    "out": "Run directory.",
    "algorithm": "dane | sdane | sdane-adaptive | sgd | fedavg | fedprox | feddyn (skewed "
    "shards: DANE's tilt kept per shard, --mu alpha) | scaffold | one-shot | admm | gd | agd.",
    "model": "A built-in name: small-cnn | lenet | compact-cnn | cnn1d | resnet8 | mlp | "
    "linear | logistic; or your own: FILE.py:NAME or package.module:NAME, a callable "
    "returning an nn.Module, called with whichever of sample_shape, in_channels, num_classes "
    "it names (torchvision.models:resnet18 works as it is).",
    "workers": "Workers of a started cluster.",
    "threads_per_worker": "Threads per worker.",
    "rounds": "Rounds (DANE iterations).",
    "eta": "DANE: step on the global gradient.",
    "mu": "Proximal strength (dane, fedprox; sdane lam, feddyn alpha: > 0).",
    "local_steps": "Local solver steps K.",
    "local_lr": "Learning rate, gd/agd step.",
    "local_optimizer": "sgd | adam.",
    "local_solver": "steps (K steps) | lbfgs | cg (exact; convex models).",
    "local_tol": "lbfgs/cg: relative gradient-norm tolerance.",
    "rho": "admm: consensus penalty.",
    "l2": "L2 penalty lambda (default: the store's l2, else 0).",
    "momentum": "SGD momentum (agd: beta).",
    "batch_size": "Minibatch size per shard.",
    "safeguard": "DANE: off | backtrack | adaptive-mu (halve rejected steps).",
    "grad_sample": "DANE: rows per shard for the gradient, fixed per run; 0: all.",
    "grad_sample_growth": "DANE: grow the gradient sample by this per round.",
    "local_theta": "DANE: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K.",
    "correction": "DANE: plain | shrink (scale g_i - g by its sampled signal-to-noise).",
    "server_momentum": "dane/fedavg/fedprox: momentum on the averaged step.",
    "server_lr": "dane/fedavg/fedprox: step s on the averaged update, w + s (mean v - w).",
    "server_lr_rule": "fixed (s = --server-lr) | fedexp (s from the local updates' spread).",
    "lr_warmup": "Local steps: --local-lr rises linearly over this many rounds; 0: off.",
    "trust_radius": "Skewed shards (dane, feddyn): steps within ||v - w|| <= R; 0: off.",
    "line_search": "DANE, skewed shards: best of N steps 2, 1, 1/2.. on the loss; 0: off.",
    "lr_schedule": "--local-lr across rounds: constant | cosine | step.",
    "local_clip": "Skewed shards: clip local step gradients to this norm; 0: off.",
    "augment": "Images: random flips and crops of each local minibatch: flip | crop=P | "
    "flip,crop=P (pad P, crop back).",
    "seed": "Seed of init and sampling.",
    "dtype": "float32 | float64.",
    "precision": "fp32 | bf16: bf16 computes the layers in bfloat16 (torch.autocast, on GPUs and "
    "on CPU) with float32 weights, gradients and sums; needs --dtype float32.",
    "device": "auto (a GPU where a worker sees one) | cpu | cuda.",
    "eval_every": "Evaluate every N rounds.",
    "stop_at_accuracy": "Stop once test accuracy reaches this; 0: never.",
    "scheduler": "Address of a running Dask scheduler to use.",
    "scheduler_file": "A running scheduler's `--scheduler-file` (jobqueue).",
    "host": "Interface a started cluster binds.",
    "broadcast": "allgather (one task per worker and phase, rounds chained on the cluster, "
    "the driver off their path) | direct | tree (each round from the driver) | auto "
    f"(allgather where it pays on a 10 Gbit/s link, else tree from {TREE_FROM_WORKERS} workers).",
    "transport": "float32 | bfloat16: how the workers' sums travel in the all-gather form; "
    "bfloat16 sends the local solutions as their change from w, half the bytes, summed in float32.",
    "dashboard_address": "Dashboard address.",
    "timeout": "Seconds to wait for a cluster, or a silent scheduler, before stopping.",
    "tls_ca_file": "--scheduler tls://...: CA certificate (PEM).",
    "tls_cert": "--scheduler tls://...: client certificate (PEM).",
    "tls_key": "--scheduler tls://...: client private key (PEM).",
}
ARGUMENTS = ("store",)  # fields given by position rather than as --flags
# `dane train`'s own options, beside RunConfig's.
ConfigFile = Annotated[Path | None, typer.Option(help="TOML file of settings; flags override it.")]
Resume = Annotated[bool, typer.Option(help="Continue the run in --out.")]


def shown_default(value: object) -> str | None:
    """A default as --help shows it (as one would type it); None for a setting left unset."""
    if value is None:
        return None
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else "none"


def with_default(text: str, default: object) -> str:
    """A help text with the default appended: 'Learning rate [0.05].'"""
    shown = shown_default(default)
    return text if shown is None else f"{text.removesuffix('.')} [{shown}]."


def run_config_parameters() -> list[inspect.Parameter]:
    """One parameter per RunConfig field; None (not given) as the value, so that a config
    file's setting stands unless the flag is passed."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    if set(fields) != set(TRAIN_HELP):
        raise AssertionError(f"TRAIN_HELP and RunConfig differ in {set(fields) ^ set(TRAIN_HELP)}")
    types = typing.get_type_hints(RunConfig)
    parameters = []
    for name, text in TRAIN_HELP.items():
        kind = typer.Argument if name in ARGUMENTS else typer.Option
        value_type = _without_none(types[name])
        info = kind(help=with_default(text, fields[name].default))
        parameters.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[value_type | None, info],
            )
        )
    return parameters


def run_config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` (taking `**flags`) as Typer sees it: RunConfig's options before its own."""
    own = inspect.signature(command, eval_str=True).parameters.values()
    kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature([*run_config_parameters(), *kept])  # type: ignore[attr-defined]
    return command


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
