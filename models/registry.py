"""Model names -> builders, with the input shapes each accepts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dask_dane.models.mlp import mlp
from dask_dane.models.small_cnn import small_cnn


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Everything needed to rebuild the same architecture on any worker."""

    name: str
    sample_shape: tuple[int, ...]
    num_classes: int
    dtype: str = "float32"


@dataclass(frozen=True)
class _Entry:
    build: Callable[[ModelSpec], nn.Module]
    fits: Callable[[tuple[int, ...]], bool]
    expects: str


MODELS: dict[str, _Entry] = {
    "small-cnn": _Entry(
        build=lambda s: small_cnn(s.sample_shape[0], s.num_classes),
        fits=lambda shape: len(shape) == 3 and shape[1:] == (8, 8),
        expects="images of shape (C, 8, 8)",
    ),
    "mlp": _Entry(
        build=lambda s: mlp(s.sample_shape, s.num_classes),
        fits=lambda shape: len(shape) >= 1,
        expects="samples of any shape",
    ),
}


def check_model_fits(name: str, sample_shape: tuple[int, ...]) -> None:
    """ValueError naming the models that do fit, if `name` is unknown or does not fit."""
    shape = tuple(sample_shape)
    fitting = [n for n, entry in MODELS.items() if entry.fits(shape)]
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}")
    if not MODELS[name].fits(shape):
        raise ValueError(
            f"model {name!r} expects {MODELS[name].expects} but the store holds samples of "
            f"shape {shape}; models that fit: {', '.join(fitting) or 'none'}"
        )


def build_model(spec: ModelSpec) -> nn.Module:
    """A freshly initialised model (use torch.manual_seed first for reproducible weights)."""
    check_model_fits(spec.name, spec.sample_shape)
    return MODELS[spec.name].build(spec).to(getattr(torch, spec.dtype))
