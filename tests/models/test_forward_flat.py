"""models/flat.py's forward_flat against torch.func.functional_call, the oracle it stands in
for: the same output and the same gradient on the flat weights, bit for bit; a BatchNorm's
statistics updated in the given buffers; the module left as it was; and a model with tied
weights taken by functional_call itself."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from dask_dane.models.flat import _plan, flatten_parameters, forward_flat, unflatten
from dask_dane.models.registry import ModelSpec, build_model


def _oracle(model, w, x, buffers=None):
    state = {**unflatten(model, w), **(buffers or {})}
    return functional_call(model, state, (x,))


def _batchnorm_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 10))  # fmt: skip


@pytest.mark.parametrize(
    "build",
    [
        lambda: build_model(ModelSpec(name="small-cnn", sample_shape=(1, 8, 8), num_classes=10)),
        lambda: build_model(ModelSpec(name="resnet8", sample_shape=(3, 8, 8), num_classes=10)),
        _batchnorm_net,
    ],
)
def test_the_output_and_gradient_are_functional_calls_bit_for_bit(build):
    torch.manual_seed(0)
    model = build().train()
    channels = next(m for m in model.modules() if isinstance(m, nn.Conv2d)).in_channels
    x = torch.randn(5, channels, 8, 8)
    w = flatten_parameters(model).double().float().requires_grad_(True)
    before = {name: p for name, p in model.named_parameters()}
    stats = {k: torch.zeros_like(b) for k, b in model.named_buffers() if b.is_floating_point()}
    theirs = {k: b.clone() for k, b in stats.items()}

    ours_out = forward_flat(model, w, x, stats or None)
    (ours_grad,) = torch.autograd.grad(ours_out.square().sum(), w)
    oracle_out = _oracle(model, w, x, theirs or None)
    (oracle_grad,) = torch.autograd.grad(oracle_out.square().sum(), w)

    assert _plan(model) is not None  # the swap path ran
    assert torch.equal(ours_out, oracle_out) and torch.equal(ours_grad, oracle_grad)
    for name in stats:  # a BatchNorm in training mode moved the given statistics
        assert torch.equal(stats[name], theirs[name]) and stats[name].abs().sum() > 0
    assert {name: p for name, p in model.named_parameters()} == before  # put back


def test_tied_weights_go_through_functional_call():
    embed = nn.Linear(6, 6, bias=False)
    model = nn.Sequential(embed, nn.ReLU(), embed)  # one tensor under two names
    w = flatten_parameters(model).requires_grad_(True)
    x = torch.randn(3, 6)

    assert _plan(model) is None
    assert torch.equal(forward_flat(model, w, x), _oracle(model, w, x))
