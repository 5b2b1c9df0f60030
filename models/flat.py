"""Flat weight vectors: the one representation of weights that travels between tasks.

Algorithms work on a single 1-D tensor per model; `functional_call` evaluates the model at any
such vector without copying it into the module, so gradients flow back to the vector itself.
A model's buffers (BatchNorm's running statistics and its batch counter) are not parameters:
they travel beside the flat vector as a dict by name, and nothing optimises them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

Buffers = dict[str, torch.Tensor]


def flatten_parameters(model: nn.Module) -> torch.Tensor:
    """The model's parameters concatenated in registration order (a detached copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def model_buffers(model: nn.Module) -> Buffers:
    """Detached copies of the model's persistent buffers, by name ({} for most models)."""
    persistent = set(model.state_dict(keep_vars=True))
    return {
        name: buffer.detach().clone()
        for name, buffer in model.named_buffers()
        if name in persistent and buffer is not None
    }


def model_state(model: nn.Module) -> tuple[torch.Tensor, Buffers]:
    """The model's flat parameters and its buffers, both copies (as the two functions above)."""
    return flatten_parameters(model), model_buffers(model)


def unflatten(model: nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Views of `flat` shaped like the model's named parameters.

    One `split`, not a slice a parameter: a slice's backward writes its gradient into a
    zero tensor the size of the whole vector and autograd sums those, one per parameter
    tensor, where split's backward is one concatenation. At 11 M weights in 64 tensors
    that made a step's backward 24x slower (docs/results/scaling.md).
    """
    named = list(model.named_parameters())
    sizes = [param.numel() for _, param in named]
    assert sum(sizes) == flat.numel(), "flat vector does not match the model's parameter count"
    return {
        name: part.view_as(param)
        for (name, param), part in zip(named, flat.split(sizes), strict=True)
    }


def forward_flat(
    model: nn.Module, flat: torch.Tensor, x: torch.Tensor, buffers: Buffers | None = None
) -> torch.Tensor:
    """model(x) evaluated at the weights in `flat`, differentiable with respect to `flat`.

    `buffers` replace the module's own for the call; a BatchNorm in training mode updates
    them in place (functional_call swaps the given tensors in), which is how a local step's
    running statistics reach the caller.
    """
    state = unflatten(model, flat)
    if buffers:
        state = {**state, **buffers}
    return functional_call(model, state, (x,))


def load_state(
    model: nn.Module, weights: torch.Tensor, buffers: Buffers | None = None
) -> nn.Module:
    """Copy a flat weight vector and buffers into `model`'s own tensors; returns the model."""
    with torch.no_grad():
        for name, view in unflatten(model, weights.detach()).items():
            target = model.get_parameter(name)
            target.copy_(view.to(target.dtype))
        for name, value in (buffers or {}).items():
            model.get_buffer(name).copy_(value)
    return model
