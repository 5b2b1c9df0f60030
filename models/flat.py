"""Flat weight vectors: the one representation of weights that travels between tasks.

Algorithms work on a single 1-D tensor per model; `functional_call` evaluates the model at any
such vector without copying it into the module, so gradients flow back to the vector itself.
A model's buffers (BatchNorm's running statistics and its batch counter) are not parameters:
they travel beside the flat vector as a dict by name, and nothing optimises them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parametrize

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
    that made a step's backward 24x slower (docs/results/scaling/transport.md).
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
    plan = _plan(model)
    if plan is None:  # tied or parametrized tensors: functional_call's general handling
        state = unflatten(model, flat)
        if buffers:
            state = {**state, **buffers}
        return functional_call(model, state, (x,))
    assert plan.count == flat.numel(), "flat vector does not match the model's parameter count"
    swaps = [
        (module._parameters, name, part.view(shape))
        for (module, name, shape), part in zip(plan.parameters, flat.split(plan.sizes), strict=True)
    ]
    for name, value in (buffers or {}).items():
        module, leaf = plan.buffers[name]
        swaps.append((module._buffers, leaf, value))
    saved = [(table, name, table[name]) for table, name, _ in swaps]
    for table, name, value in swaps:
        table[name] = value
    try:
        return model(x)
    finally:
        for table, name, value in saved:
            table[name] = value


@dataclass(frozen=True)
class _SwapPlan:
    """Where each parameter and buffer of a module lives, found once per module."""

    parameters: list[tuple[nn.Module, str, torch.Size]]
    sizes: list[int]
    count: int
    buffers: dict[str, tuple[nn.Module, str]]


# The attribute a module keeps its plan under: the plan lives and dies with its module (a
# worker's are the holder's, pipeline/engine/round/worker_state.py), with no table beside it.
_PLAN_ATTRIBUTE = "_dask_dane_swap_plan"


def _plan(model: nn.Module) -> _SwapPlan | None:
    """The module's swap plan, or None where a tensor is shared by two names or a
    parametrization computes one: functional_call unties and reparametrizes those.

    The swap is what functional_call does for each name (the views set into the modules'
    tensor tables for the call, the originals put back after), without its per-call walk
    over the module tree and its checks: ~0.1 ms a forward, most of a small model's."""
    if _PLAN_ATTRIBUTE in model.__dict__:
        return model.__dict__[_PLAN_ATTRIBUTE]
    modules = dict(model.named_modules(remove_duplicate=False))
    shared = len(list(model.named_parameters(remove_duplicate=False))) != len(
        list(model.named_parameters())
    ) or len(list(model.named_buffers(remove_duplicate=False))) != len(list(model.named_buffers()))
    plan = None
    if not shared and not any(parametrize.is_parametrized(m) for m in modules.values()):
        parameters = []
        for name, param in model.named_parameters():
            owner, _, leaf = name.rpartition(".")
            parameters.append((modules[owner], leaf, param.shape))
        owners = {
            name: (modules[name.rpartition(".")[0]], name.rpartition(".")[2])
            for name, _ in model.named_buffers()
        }
        sizes = [shape.numel() for _, _, shape in parameters]
        plan = _SwapPlan(parameters, sizes, sum(sizes), owners)
    model.__dict__[_PLAN_ATTRIBUTE] = plan  # beside the module's tables, not in them
    return plan


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
