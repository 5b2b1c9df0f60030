"""A server-side line search along DANE's averaged step (--line-search N).

Legend: w = weights at the start of the round, p = mean_i v_i (the proposal), d = p - w,
F = the global loss (the mean of the shards' losses, weighted by shard size).
Plain DANE takes w' = p = w + 1 * d. On skewed shards d is the average of solves that each
ran far along their own correction, so a step of 1 can overshoot or fall short by a lot.
The search tries the N step sizes s = 2, 1, 1/2, ... (N of them) and keeps the one with the
lowest F(w + s d). Bischoff, Günnemann, Jaggi & Stich (2021) found a global line search to be
what makes second-order federated methods competitive with FedAvg.

It costs a third phase: p goes to the shards (one broadcast, like the gradient's), each shard
returns N losses (scalars, not counted as bytes). F is measured on the rows DANE's gradient
phase reads (--grad-sample, else the whole shard), forward passes only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ...round.objective import ShardObjective


def trial_steps(count: int) -> list[float]:
    """The step sizes tried: 2, 1, 1/2, ... (`count` of them)."""
    return [2.0 ** (1 - k) for k in range(count)]


def losses_along(
    objective: ShardObjective, w: torch.Tensor, proposal: torch.Tensor, count: int
) -> dict[str, float]:
    """This shard's loss at w + s (proposal - w) for every trial step s, as round metrics."""
    direction = proposal - w
    return {_key(k): objective.loss(w + s * direction) for k, s in enumerate(trial_steps(count))}


def best_step(mean_metrics: dict[str, float], count: int) -> tuple[float, float]:
    """(s, F(w + s d)) with the lowest averaged loss; the larger step on a tie."""
    losses = [mean_metrics[_key(k)] for k in range(count)]
    k = min(range(count), key=lambda i: (losses[i], i))
    return trial_steps(count)[k], losses[k]


def _key(k: int) -> str:
    return f"line_search_loss_{k}"
