"""small-cnn: a two-convolution network for 8x8 grey images (scikit-learn's digits)."""

from __future__ import annotations

from torch import nn


def small_cnn(in_channels: int, num_classes: int) -> nn.Module:
    """conv3x3(16) - conv3x3(32) - maxpool2 - dense(64) - dense(classes): about 38k weights.

    No batch norm: its running statistics are state outside the weight vector, and averaging
    them across shards is not what DANE's analysis covers.
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )
