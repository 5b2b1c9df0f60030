"""InexactDANE's stop on minibatch steps: ||grad h_i|| <= theta ||g||, on a smoothed gradient.

Reddi et al. (2016) stop a local solve once the local problem's gradient norm is at most
theta ||g||. Their solver reads full gradients; ours reads a minibatch of B rows a step, and
one minibatch's gradient is mostly noise once a network fits its shard: on digits (small-cnn,
B = 32) a test on it stopped solves after 1 or 2 steps in rounds where the shard's gradient
of h_i was nowhere near the bound, and ran all K in the next (`local_steps` per round 30, 2.5,
30, 30, 3.5, ...). So the test reads a moving average of the steps' gradients (bias-corrected,
as Adam's, SMOOTHING 0.9: about the last 10 steps), and no solve stops before the average
has seen WARMUP_STEPS of them, or half its K where that is fewer (a solve of K <= 10 steps
may still stop). The exact solvers read full gradients and test them as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SMOOTHING = 0.9
WARMUP_STEPS = 10  # 1 / (1 - SMOOTHING): the window the average spans


class SmoothedStop:
    """A StopRule (local_problem.py) for one solve: True once the averaged gradient's norm
    is at most `bound`. Called with each step's gradient of h_i, from the second step on."""

    def __init__(self, bound: float, steps: int) -> None:
        self.bound = bound
        self.warmup = max(1, min(WARMUP_STEPS, steps // 2))  # steps: the solve's K
        self.average: torch.Tensor | None = None
        self.seen = 0

    def __call__(self, grad: torch.Tensor, v: torch.Tensor) -> bool:
        self.seen += 1
        if self.average is None:
            self.average = grad.mul(1.0 - SMOOTHING)
        else:
            self.average.mul_(SMOOTHING).add_(grad, alpha=1.0 - SMOOTHING)
        if self.seen < self.warmup:
            return False
        corrected = float(self.average.norm()) / (1.0 - SMOOTHING**self.seen)
        return corrected <= self.bound
