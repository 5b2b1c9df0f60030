"""Flat weight vectors: the one representation of weights that travels between tasks.

Algorithms work on a single 1-D tensor per model; `functional_call` evaluates the model at any
such vector without copying it into the module, so gradients flow back to the vector itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call


def flatten_parameters(model: nn.Module) -> torch.Tensor:
    """The model's parameters concatenated in registration order (a detached copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def unflatten(model: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Views of `flat` shaped like the model's named parameters."""
    params: dict[str, torch.Tensor] = {}
    offset = 0
    for name, param in model.named_parameters():
        params[name] = flat[offset : offset + param.numel()].view_as(param)
        offset += param.numel()
    assert offset == flat.numel(), "flat vector does not match the model's parameter count"
    return params


def forward_flat(model: nn.Module, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """model(x) evaluated at the weights in `flat`, differentiable with respect to `flat`."""
    return functional_call(model, unflatten(model, flat), (x,))
