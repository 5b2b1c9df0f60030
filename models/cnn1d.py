"""cnn1d: the reference convolutional network of MNIST-1D (Greydanus 2020, ConvBase in models.py).

Three Conv1d layers of 25 channels (kernel 5, then 3 and 3; stride 2, padding 1 each) with ReLU,
then one linear layer on the flattened features. For 40-sample signals the lengths go
40 -> 19 -> 10 -> 5, i.e. 125 features and 5,210 weights; the paper reports 94% test accuracy.
"""

from __future__ import annotations

from torch import nn

CHANNELS = 25


def conv_output_length(length: int, *, kernel: int, stride: int, padding: int) -> int:
    """Length after a Conv1d (PyTorch's formula, dilation 1)."""
    return (length + 2 * padding - kernel) // stride + 1


def cnn1d_features(length: int) -> int:
    """Length of the last convolution's output for an input of `length` samples (>= 1 if valid)."""
    for kernel in (5, 3, 3):
        length = conv_output_length(length, kernel=kernel, stride=2, padding=1)
    return length


def cnn1d(in_channels: int, length: int, num_classes: int) -> nn.Module:
    """conv1d(25, k5, s2) - conv1d(25, k3, s2) - conv1d(25, k3, s2) - dense(classes).

    Parameters
    ----------
    in_channels
        Channels of the input signals (1 for MNIST-1D).
    length
        Samples per signal (40 for MNIST-1D); at least 3.
    num_classes
        Outputs (one logit per class).

    Returns
    -------
    torch.nn.Module
        The network, taking (N, in_channels, length) and returning (N, num_classes).
    """
    return nn.Sequential(
        nn.Conv1d(in_channels, CHANNELS, kernel_size=5, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv1d(CHANNELS, CHANNELS, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(CHANNELS * cnn1d_features(length), num_classes),
    )
