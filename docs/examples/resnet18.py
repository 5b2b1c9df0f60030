"""ResNet-18 as torchvision builds it (He et al. 2016), in a file of a user's own.

The layout of `torchvision.models.resnet18`: a 7x7 stride-2 stem with max pooling, four
stages of two basic blocks (64, 128, 256, 512 channels), BatchNorm after every convolution,
global average pooling and one linear layer: 11.2 M weights for 10 classes, 9,600 floats of
BatchNorm running statistics and 20 batch counters. Written here, not imported, because
torchvision is not a dependency of dask-dane; with torchvision installed,
`--model torchvision.models:resnet18` trains the same network.

    dane train STORE --model docs/examples/resnet18.py:resnet18
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, width = [], 64
        for channels, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(
                nn.Sequential(
                    BasicBlock(width, channels, stride), BasicBlock(channels, channels, 1)
                )
            )
            width = channels
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18(*, weights: None = None, progress: bool = True, **kwargs: int) -> nn.Module:
    """torchvision's signature: only num_classes arrives, through **kwargs."""
    return ResNet18(num_classes=kwargs.get("num_classes", 1000))
