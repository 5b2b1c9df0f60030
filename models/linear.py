"""linear and logistic: the convex models of the DANE paper, on tabular rows x of shape (d,).

The loss (squared error, cross-entropy) and the L2 penalty live in
pipeline/engine/round/objective.py; these are only the maps x -> <x, w> and x -> W x + b.
"""

from __future__ import annotations

from torch import nn


def linear(num_features: int) -> nn.Module:
    """x -> <x, w>, no bias: least squares (1/N) sum (<x, w> - y)^2 (+ lambda ||w||^2)."""
    return nn.Linear(num_features, 1, bias=False)


def logistic(num_features: int, num_classes: int) -> nn.Module:
    """x -> W x + b, scored by cross-entropy: multinomial logistic regression."""
    return nn.Linear(num_features, num_classes)
