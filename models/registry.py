"""Model names -> builders, with the input shapes each accepts; a user's model by import path.

The built-in names below and a user's callable (`FILE.py:NAME`, `package.module:NAME`, or a
Python callable given to `dask_dane.train`) are entries of one registry: `build_model` takes
either from a ModelSpec. A user's callable travels inside the spec as bytes (models/user.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .cnn1d import cnn1d, cnn1d_features
from .compact_cnn import compact_cnn
from .lenet import lenet
from .linear import linear, logistic
from .mlp import mlp
from .resnet8 import resnet8
from .small_cnn import small_cnn
from .user import (
    call_builder,
    from_bytes,
    is_import_path,
    model_file_hint,
    resolve,
    to_bytes,
)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Everything needed to rebuild the same architecture on any worker."""

    name: str
    sample_shape: tuple[int, ...]
    num_classes: int
    dtype: str = "float32"
    # The L2 penalty lambda*||w||^2 in every shard's loss: part of the model's objective, so it
    # travels with the spec to every task that builds one (engine/round/objective.py applies it).
    l2: float = 0.0
    # A user's model: the builder as bytes (models/user.py); empty for the built-in names.
    builder: bytes = b""
    # For models whose output depends on the batch (BatchNorm in training mode): full-shard
    # losses are means over batches of this many rows, the local steps' batch size, so that a
    # full-shard gradient is the gradient of the objective the local steps minimise.
    train_batch: int = 0
    # Random flips / crops of each local step's minibatch (engine/round/augment.py); "" for none.
    augment: str = ""
    # fp32, or bf16: forward and backward under torch.autocast, weights and gradients in dtype.
    precision: str = "fp32"

    @property
    def is_user_model(self) -> bool:
        return is_import_path(self.name)


@dataclass(frozen=True)
class _Entry:
    build: Callable[[ModelSpec], nn.Module]
    fits: Callable[[tuple[int, ...]], bool]
    expects: str
    task: str = "classification"  # the store task the model's output is scored for
    convex: bool = False  # convex loss in w: exact local solvers (lbfgs, cg) apply


MODELS: dict[str, _Entry] = {
    "small-cnn": _Entry(
        build=lambda s: small_cnn(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 3 and shape[1:] == (8, 8),
        expects="images of shape (C, 8, 8)",
    ),
    "lenet": _Entry(
        build=lambda s: lenet(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 3 and shape[1:] == (28, 28),
        expects="images of shape (C, 28, 28)",
    ),
    "compact-cnn": _Entry(
        build=lambda s: compact_cnn(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 3 and shape[1:] == (28, 28),
        expects="images of shape (C, 28, 28)",
    ),
    "cnn1d": _Entry(
        build=lambda s: cnn1d(s.sample_shape[0], s.sample_shape[1], s.num_classes),
        fits=lambda shape: len(shape) == 2 and cnn1d_features(shape[1]) >= 1,
        expects="signals of shape (C, L) with L >= 3",
    ),
    "resnet8": _Entry(
        build=lambda s: resnet8(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 3 and min(shape[1:]) >= 8,
        expects="images of shape (C, H, W) with H, W >= 8",
    ),
    "mlp": _Entry(
        build=lambda s: mlp(s.sample_shape, s.num_classes),
        fits=lambda shape: len(shape) >= 1,
        expects="samples of any shape",
    ),
    "linear": _Entry(
        build=lambda s: linear(s.sample_shape[0]),
        fits=lambda shape: len(shape) == 1,
        expects="tabular rows of shape (d,)",
        task="regression",
        convex=True,
    ),
    "logistic": _Entry(
        build=lambda s: logistic(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 1,
        expects="tabular rows of shape (d,)",
        convex=True,
    ),
}


def check_model_fits(name: str, sample_shape: tuple[int, ...]) -> None:
    """ValueError naming the models that do fit, if `name` is unknown or does not fit.

    A user's model (an import path) is checked by running a batch through it instead
    (pipeline/setup/model_check.py): its shapes are its own.
    """
    if is_import_path(name):
        return
    shape = tuple(sample_shape)
    fitting = [n for n, entry in MODELS.items() if entry.fits(shape)]
    if name not in MODELS:
        raise ValueError(model_file_hint(name) or _unknown_model(name))
    if not MODELS[name].fits(shape):
        raise ValueError(
            f"model {name!r} expects {MODELS[name].expects} but the store holds samples of "
            f"shape {shape}; models that fit: {', '.join(fitting) or 'none'}"
        )


def _unknown_model(name: str) -> str:
    """The message for a name that is no model: the built-in one it is near, and the list."""
    known = ", ".join(sorted(MODELS))
    near = difflib.get_close_matches(name, MODELS, n=1, cutoff=0.75)
    if near:
        return f"unknown model {name!r}; did you mean {near[0]}? (models: {known})"
    return f"unknown model {name!r}; choose one of: {known}"


def check_model_task(name: str, task: str) -> None:
    """ValueError if model `name` scores another task than the store's (e.g. linear on labels)."""
    if is_import_path(name):
        return  # its output shape is checked against the task instead
    expected = MODELS[name].task
    if expected != task:
        fitting = [n for n, entry in MODELS.items() if entry.task == task]
        raise ValueError(
            f"model {name!r} is for {expected} but the store holds a {task} task; models for "
            f"{task}: {', '.join(sorted(fitting)) or 'none'}"
        )


def is_convex(name: str) -> bool:
    """True for models whose training loss is convex in the weights (linear, logistic)."""
    return name in MODELS and MODELS[name].convex


def user_spec_builder(name: str) -> bytes:
    """The bytes a user's model travels as, resolved from its import path on this process."""
    return to_bytes(resolve(name))


def checked_model(spec: ModelSpec, task: str, *, exact_solver: str | None = None) -> nn.Module:
    """build_model, after every check the registry makes: a built-in model fits the samples
    and scores `task`; with `exact_solver` (a local solver that solves exactly, by name), it
    is convex. One ValueError with the fix for the first that fails."""
    check_model_fits(spec.name, spec.sample_shape)
    check_model_task(spec.name, task)
    if exact_solver is not None and not is_convex(spec.name):
        raise ValueError(
            f"--local-solver {exact_solver} solves the local problem exactly, which needs a "
            f"convex model, and {spec.name!r} is not; use --model linear or logistic, or "
            "--local-solver steps"
        )
    return build_model(spec)


def build_model(spec: ModelSpec) -> nn.Module:
    """A freshly initialised model (use torch.manual_seed first for reproducible weights)."""
    dtype = getattr(torch, spec.dtype)
    if spec.is_user_model:
        builder = from_bytes(spec.builder, spec.name) if spec.builder else resolve(spec.name)
        model = call_builder(
            builder, sample_shape=spec.sample_shape, num_classes=spec.num_classes, name=spec.name
        )
        return model.to(dtype)
    check_model_fits(spec.name, spec.sample_shape)
    return MODELS[spec.name].build(spec).to(dtype)
