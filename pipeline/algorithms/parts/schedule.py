"""Learning-rate schedules across rounds (--lr-schedule), as a single-machine run would use.

The factor multiplies --local-lr in round t of --rounds (t counted from 1):
- constant: 1;
- cosine: (1 + cos(pi (t - 1) / rounds)) / 2, from 1 in round 1 down towards 0 at the end;
- step: 1, then 0.1 after half the rounds and 0.01 after three quarters.
The schedule spans --rounds as configured: a resumed run with more rounds stretches it.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine", "step")


def lr_factor(schedule: str, round_index: int, rounds: int) -> float:
    """What --local-lr is multiplied by in round `round_index` of `rounds`."""
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * (round_index - 1) / max(rounds, 1)))
    assert schedule == "step", schedule
    milestones = (rounds / 2, 3 * rounds / 4)
    return 0.1 ** sum(round_index > m for m in milestones)
