"""mlp: one hidden layer on flattened inputs; fits any sample shape (tests, quick baselines)."""

from __future__ import annotations

import math

from torch import nn


def mlp(sample_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> nn.Module:
    """Flatten - dense(hidden) - tanh - dense(classes)."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(sample_shape), hidden),
        nn.Tanh(),
        nn.Linear(hidden, num_classes),
    )
