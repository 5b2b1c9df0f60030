"""DANE's correction shrunk by its own signal-to-noise ratio (`correction = "shrink"`).

DANE tilts shard i's local problem by the linear term g_i - eta*g = d_i + (1 - eta)*g, where
d_i = g_i - g is the shard's own part of the correction. With a gradient sample
(`grad_sample` = N rows of each shard, fixed per run) g_i and g are means over samples, and
d_i carries their sampling noise. On iid shards the true d_i is small (0.007-0.028 on
Fashion-MNIST) and the sampled one mostly noise (0.15-0.22, docs/results/scaling/accuracy.md):
it tilts every local solve in a random direction. `shrink` scales d_i by

    alpha_i = max(0, 1 - tr Var(d_i) / ||d_i||^2),

the positive-part James-Stein factor. It is also the variance-optimal coefficient
||d||^2 / (||d||^2 + tr Var) with the unknown ||d||^2 estimated by ||d_i||^2 - tr Var (the
reason alpha-SVRG, Yin et al. 2025, scales its correction below 1). Noise-dominated
corrections fall towards 0, where DANE becomes FedProx (mu > 0) or local SGD; corrections
with signal (skewed shards) stay near 1.

The variance, from the same gradient pass: the sample's rows split into halves a and b of
h and N - h rows, and since Cov(g_a - g_b) = Sigma_i (1/h + 1/(N - h)) for the per-row
covariance Sigma_i,
    tr Sigma_i ~ ||g_a - g_b||^2 h (N - h) / N,
    V_i = tr Var(g_i) = tr Sigma_i / N * (1 - N / n_i)   (n_i rows drawn without replacement),
    Var(g) = sum_j w_j^2 V_j with w_j = n_j / n the shards' weights in g,
    tr Var(d_i) = (1 - 2 w_i) V_i + Var(g)   (g holds g_i with weight w_i).
A sample of the whole shard (grad_sample 0, or N >= n_i) has V_i = 0: the correction is exact
and alpha_i = 1, so the option never changes a full-gradient run. The cost: the two halves
are two passes over the same N rows (one backward more), two numbers per shard in the
gradient phase's metrics and two in its broadcast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import rows_or_all
from .hyperparameters import Declaration

if TYPE_CHECKING:
    import torch

    from ...engine.protocol import Objective

CORRECTIONS = ("plain", "shrink")
# The gradient sample dane and sdane take f_i and g_i on (declared once, hyperparameters.py).
GRAD_SAMPLE = Declaration(
    default=0,
    rule=rows_or_all,
    exclusive=True,
    help="DANE: rows per shard for the gradient, fixed per run; 0: all.",
)
# The gradient phase's metrics that carry the shards' noise to the broadcast (averaged with
# the shards' weights w_j = n_j / n): n_j * V_j and N_j / n_j (sample rows per shard row).
NOISE_ROWS = "correction_noise_rows"
SAMPLE_SHARE = "grad_sample_share"
NOISE = "grad_noise"  # the broadcast's tensor: [Var(g), n]


def sampling_variance(
    sample: Objective, shard_rows: int, w: torch.Tensor
) -> tuple[float, torch.Tensor, float]:
    """(f_i, g_i, V_i) on `sample` (N of the shard's `shard_rows` rows): the loss and gradient
    as a weighted mean of two half-samples, and V_i = tr Var(g_i) as above."""
    import torch

    rows = sample.num_samples
    if rows >= shard_rows or rows < 2:  # the whole shard: the gradient is exact
        loss, grad = sample.loss_and_grad(w)
        return loss, grad, 0.0
    half = rows // 2
    first, second = sample.row_range(0, half), sample.row_range(half, rows)
    loss_a, grad_a = first.loss_and_grad(w)
    loss_b, grad_b = second.loss_and_grad(w)
    weight_a, weight_b = half / rows, (rows - half) / rows
    loss = weight_a * loss_a + weight_b * loss_b
    grad = weight_a * grad_a + weight_b * grad_b
    spread = float(torch.sum((grad_a - grad_b) ** 2))
    per_row = spread * half * (rows - half) / rows
    return loss, grad, per_row / rows * (1.0 - rows / shard_rows)


def noise_metrics(variance: float, sample_rows: int, shard_rows: int) -> dict[str, float]:
    """What shard i reports for the broadcast to find Var(g) and n (see NOISE_ROWS)."""
    return {NOISE_ROWS: shard_rows * variance, SAMPLE_SHARE: sample_rows / shard_rows}


def mean_noise(metrics: dict[str, float], sample_rows: int) -> torch.Tensor:
    """[Var(g), n] from the gradient phase's weighted means and its summed sample rows:
    mean(N_j / n_j) = sum_j N_j / n gives n, and mean(n_j V_j) / n = sum_j w_j^2 V_j."""
    import torch

    total_rows = sample_rows / metrics[SAMPLE_SHARE]
    return torch.tensor([metrics[NOISE_ROWS] / total_rows, total_rows], dtype=torch.float64)


def shrink_factor(
    own: torch.Tensor, mean: torch.Tensor, variance: float, shard_rows: int, noise: torch.Tensor
) -> float:
    """alpha_i for d_i = own - mean, given V_i and the broadcast's [Var(g), n]."""
    import torch

    global_variance, total_rows = float(noise[0]), float(noise[1])
    weight = shard_rows / total_rows
    noise_of_d = max((1.0 - 2.0 * weight) * variance + global_variance, 0.0)
    if noise_of_d == 0.0:
        return 1.0
    signal = float(torch.sum((own - mean) ** 2))
    if signal == 0.0:
        return 0.0
    return max(0.0, 1.0 - noise_of_d / signal)


def shrunk_linear(own: torch.Tensor, mean: torch.Tensor, eta: float, factor: float) -> torch.Tensor:
    """The local problem's linear term alpha_i * (g_i - g) + (1 - eta) * g."""
    if factor == 1.0:  # bit for bit the paper's term (an exact gradient gives factor 1)
        return own - eta * mean
    return factor * (own - mean) + (1.0 - eta) * mean
