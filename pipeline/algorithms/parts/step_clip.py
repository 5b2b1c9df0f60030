"""The local steps' gradient clip (--local-clip), without a host sync on a GPU.

Apart from local_solver.py, which declares the settings that `dane train --help` reads without
torch: the solver imports this module when it solves.
"""

from __future__ import annotations

import torch


def clip_norm_(grad: torch.Tensor, clip: float) -> None:
    """Scale `grad` in place down to norm `clip` where it is longer: on a CPU by the norm
    read as a number, on a GPU by a tensor (the two give the same bits)."""
    if grad.device.type == "cpu":
        clip_by_number_(grad, clip)
    else:
        clip_by_tensor_(grad, clip)


def clip_by_number_(grad: torch.Tensor, clip: float) -> None:
    """The norm read as a number. On a CPU nothing is queued, so nothing waits, and it is the
    cheaper form (some 2 us against 14 us for the tensor form, on 650 weights)."""
    norm = float(torch.linalg.vector_norm(grad))
    if norm > clip:
        grad.mul_(clip / norm)


def clip_by_tensor_(grad: torch.Tensor, clip: float) -> None:
    """The scale kept a tensor: on a GPU reading the norm would wait for every queued kernel,
    once a step. It is computed in float64, as Python computes the number, and multiplied in
    as 1 where the norm is within `clip` (x * 1 is x; a NaN norm scales nothing, as the
    number's comparison does), so it gives clip_by_number_'s bits."""
    norm = torch.linalg.vector_norm(grad).double()
    # A division of tensors: `clip / norm` is clip times 1 / norm, with other last bits.
    scale = norm.new_full((), clip).div(norm)
    grad.mul_(torch.where(norm > clip, scale, 1.0))
