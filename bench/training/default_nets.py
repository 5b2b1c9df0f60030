"""Networks as a user writes them, for `dane bench defaults`: a plain conv net, the same with
BatchNorm, and a BatchNorm MLP. Each takes any image size (adaptive pooling), so that one
definition runs on 8x8 digits and on 28x28 Fashion-MNIST, as a user's own file would; run
as `--model dask_dane.bench.training.default_nets:conv_bn`.

The built-in networks carry no BatchNorm (their running statistics are state outside the
weight vector); a user's networks do, and the defaults must survive them too.
"""

from __future__ import annotations

from torch import nn

POOLED = 2  # the features' side after adaptive pooling: 2x2 maps into the classifier


def _conv_net(in_channels: int, num_classes: int, batch_norm: bool) -> nn.Module:
    def block(channels_in: int, channels_out: int) -> list[nn.Module]:
        norm = [nn.BatchNorm2d(channels_out)] if batch_norm else []
        conv = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=not batch_norm)
        return [conv, *norm, nn.ReLU()]

    return nn.Sequential(
        *block(in_channels, 16),
        nn.MaxPool2d(2),
        *block(16, 32),
        nn.AdaptiveAvgPool2d(POOLED),
        nn.Flatten(),
        nn.Linear(32 * POOLED * POOLED, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def conv(in_channels: int, num_classes: int) -> nn.Module:
    """conv3x3(16) - pool - conv3x3(32) - adaptive pool 2x2 - dense(64) - dense."""
    return _conv_net(in_channels, num_classes, batch_norm=False)


def conv_bn(in_channels: int, num_classes: int) -> nn.Module:
    """`conv` with BatchNorm after each convolution."""
    return _conv_net(in_channels, num_classes, batch_norm=True)


def mlp_bn(sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """dense(128) - BatchNorm - ReLU - dense(64) - BatchNorm - ReLU - dense."""
    features = 1
    for side in sample_shape:
        features *= side
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(features, 128),
        nn.BatchNorm1d(128),
        nn.ReLU(),
        nn.Linear(128, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def _wide_conv(sample_shape: tuple[int, ...], num_classes: int, batch_norm: bool) -> nn.Module:
    channels, height, width = sample_shape
    norm = [nn.BatchNorm2d(16)] if batch_norm else []
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1),
        *norm,
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(16 * height * width, num_classes),
    )


def wide_conv_bn(sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """docs/python.md's network: conv3x3(16) - BatchNorm - ReLU - dense, no pooling."""
    return _wide_conv(sample_shape, num_classes, batch_norm=True)


def wide_conv(sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """`wide_conv_bn` without its BatchNorm."""
    return _wide_conv(sample_shape, num_classes, batch_norm=False)


def conv_bn_dropout(in_channels: int, num_classes: int) -> nn.Module:
    """conv3x3(6) - BatchNorm - ReLU - dropout(0.2) - dense: running statistics and random
    masks (the network of the suite's user-model tests), for 8x8 images."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(6 * 8 * 8, num_classes),
    )
