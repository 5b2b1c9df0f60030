"""resnet8: a small residual network for images of any size from 8x8 up (He et al. 2016).

The CIFAR-style ResNet with one basic block per stage: conv3x3(16), three stages of 16, 32 and
64 channels (strides 1, 2, 2), global average pooling and a linear layer: 8 weighted layers on
the main path, about 78k weights. GroupNorm replaces BatchNorm: batch norm's running statistics
would be state outside the flat weight vector, and averaging them across shards is not what
DANE's analysis covers; GroupNorm normalises each sample alone and has only weights.
"""

from __future__ import annotations

import torch
from torch import nn

STAGE_CHANNELS = (16, 32, 64)
NORM_GROUPS = 8  # divides every stage's channel count


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(NORM_GROUPS, channels)


class BasicBlock(nn.Module):
    """Two conv3x3 + GroupNorm layers around a shortcut (a 1x1 conv when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.norm2 = _norm(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                _norm(out_channels),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet8(nn.Module):
    """Stem conv3x3(16) - 3 basic blocks - global average pool - dense(classes)."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        first = STAGE_CHANNELS[0]
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, first, 3, padding=1, bias=False), _norm(first), nn.ReLU()
        )
        blocks, channels = [], first
        for i, width in enumerate(STAGE_CHANNELS):
            blocks.append(BasicBlock(channels, width, stride=1 if i == 0 else 2))
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.blocks(self.stem(x))
        return self.head(features.mean(dim=(2, 3)))


def resnet8(in_channels: int, num_classes: int) -> nn.Module:
    """A ResNet-8 with GroupNorm for (in_channels, H, W) images, H and W at least 8.

    Parameters
    ----------
    in_channels
        Channels of the input images.
    num_classes
        Outputs (one logit per class).

    Returns
    -------
    torch.nn.Module
        The network; it holds no buffers, so the flat weight vector is its whole state.
    """
    return ResNet8(in_channels, num_classes)
