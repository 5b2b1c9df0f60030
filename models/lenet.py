"""lenet: two 5x5 convolutions with pooling and a dense layer, for 28x28 images (Fashion-MNIST).

The layout of the 2-conv network in the Fashion-MNIST benchmark (zalandoresearch/fashion-mnist,
benchmark/convnet.py: 91.6% test accuracy), with a 128-unit dense layer instead of 1024 and no
dropout, so that the whole model is about 455k weights and every step is deterministic.
"""

from __future__ import annotations

from torch import nn


def lenet(in_channels: int, num_classes: int, image_size: int = 28) -> nn.Module:
    """conv5x5(32) - pool2 - conv5x5(64) - pool2 - dense(128) - dense(classes).

    Parameters
    ----------
    in_channels
        Channels of the input images.
    num_classes
        Outputs (one logit per class).
    image_size
        Side of the square input; 28 for (Fashion-)MNIST. "Same" padding keeps the size
        through each convolution, so each pooling halves it.

    Returns
    -------
    torch.nn.Module
        The network; it holds no buffers, so the flat weight vector is its whole state.
    """
    side = image_size // 2 // 2
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * side * side, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )
