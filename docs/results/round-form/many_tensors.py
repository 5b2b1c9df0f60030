"""Two networks of ResNet-18's size (11 M weights, about 45 MB in float32) for timing a local
step: `dane bench precision --model docs/results/round-form/many_tensors.py:NAME`.

They differ in how many parameter tensors hold the weights: 8 in `wide`, 64 in `deep`
(ResNet-18 has 62). Both are MLPs, so a step is cheap on a CPU and what the engine adds
around it shows.
"""

import math

from torch import nn


def wide(num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
    """11.7 M weights in 8 tensors."""
    features = math.prod(sample_shape)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(features, 2048),
        nn.ReLU(),
        nn.Linear(2048, 4096),
        nn.ReLU(),
        nn.Linear(4096, 768),
        nn.ReLU(),
        nn.Linear(768, num_classes),
    )


def deep(num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
    """10.9 M weights in 64 tensors: 32 layers of 600 units."""
    features = math.prod(sample_shape)
    hidden = [nn.Sequential(nn.ReLU(), nn.Linear(600, 600)) for _ in range(30)]
    return nn.Sequential(
        nn.Flatten(), nn.Linear(features, 600), *hidden, nn.ReLU(), nn.Linear(600, num_classes)
    )
