"""The gradient noise scale of a round, from the shards' gradients at w that it computes anyway.

Legend: w = weights at the start of the round, g_j = shard j's gradient at w over b_j rows,
n_j = shard j's rows (its weight w_j = n_j / n in the mean g = sum_j w_j g_j), G = the true
gradient, Sigma = the per-example gradients' covariance, B_simple = tr(Sigma) / |G|^2.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", appendix A): a gradient
over B rows drawn iid has E|g_B|^2 = |G|^2 + tr(Sigma) / B. Two batch sizes give two
equations, solved for unbiased estimates of both unknowns:

    |G|^2    ~ (B_big |G_big|^2 - b_small |G_small|^2) / (B_big - b_small),
    tr Sigma ~ (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / B_big).

Here |G_small|^2 = sum_j w_j |g_j|^2 (the row-weighted mean over shards), |G_big|^2 = |g|^2,
and the batch sizes are the effective ones of those weighted means: 1 / b_small =
sum_j w_j / b_j and 1 / B_big = sum_j w_j^2 / b_j. For m equal shards of b rows each these
are the paper's b_small = b and B_big = m b. One shard gives no second size: no estimate.

What it measures, and its bias. The formula assumes each g_j averages b_j rows drawn with
replacement. A round's rows are drawn without: each shard's rows (or its fixed
`grad_sample`) are a slice of a partition fixed for the run, and DANE's full-shard g_j has
no sampling noise relative to its own shard. The estimate is then the spread between the
shards' gradients, |G_small|^2 - |G_big|^2 = sum_j w_j |g_j - g|^2, rescaled to one example
by 1 / (1/b_small - 1/B_big). For a random (iid) partition of N rows, with full shards or
equal samples of every shard, its expectation over the partition is exact: with Sigma_N the
data set's own per-example covariance (normalised by N), E|g_j - G_N|^2 = tr(Sigma_N)
(N - b_j) / (b_j (N - 1)) (the finite-population correction) and the spread's expectation is
tr(Sigma_N) (1/b_small - 1/B_big) N / (N - 1). For m equal shards of n = N / m rows that is
tr(Sigma_N) (m - 1) / (N - 1), about tr(Sigma) / n: the per-example covariance scaled by the
shard size. So the tr Sigma estimate is unbiased for the data set's sample covariance
(normalised by N - 1), itself unbiased for the distribution the rows came from, and the
|G|^2 estimate has expectation |G_N|^2 - tr(Sigma_N) / (N - 1), unbiased for that
distribution's |G|^2 (E|G_N|^2 = |G|^2 + tr(Sigma) / N). Two limits: (1) the partition and
the samples are the same every round, so a run's estimates share one draw of rows and their
error does not average out across rounds (sync SGD's fresh minibatches do); (2) on a skewed
partition (label-skew, dirichlet) the shards differ in their true gradients, and that
difference counts as noise: tr Sigma is overestimated and |G|^2 underestimated, so B_simple
is too large.

The ratio of two noisy estimates is biased, and |G|^2's estimate may even be negative: the
per-round B_simple is left out (None) then, and the run smooths numerator and denominator
apart, as the paper does (metrics.py: `noise_scale_ema`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...engine.protocol import LocalOutput

if TYPE_CHECKING:
    import torch

    from ...engine.protocol import Objective

# The gradient phase's helper metrics, averaged over shards with weights w_j like every
# metric: |g_j|^2, 1 / b_j, n_j / b_j and b_j / n_j. The leading underscore keeps them out of
# the metrics row (metrics.round_row): they are sums for the reduction, not figures.
GRAD_SQ = "_noise_grad_sq"
INV_ROWS = "_noise_inv_rows"
SHARD_PER_ROW = "_noise_shard_per_row"
ROW_PER_SHARD = "_noise_row_per_shard"
# The round's figures, each in every metrics row (None where the round has none).
FIGURES = ("noise_scale", "noise_trace", "noise_grad_sq")


def shard_metrics(g_j: torch.Tensor, rows: int, shard_rows: int) -> dict[str, float]:
    """What shard j adds to its gradient phase's metrics: its gradient's squared norm and its
    `rows` (b_j, the rows g_j averages) against its `shard_rows` (n_j, its weight)."""
    import torch

    return {
        # One float64 reduction, no float64 copy squared: half the time at 11 M weights.
        GRAD_SQ: float(torch.linalg.vector_norm(g_j, dtype=torch.float64)) ** 2,
        INV_ROWS: 1.0 / rows,
        SHARD_PER_ROW: shard_rows / rows,
        ROW_PER_SHARD: rows / shard_rows,
    }


def two_batch_estimate(
    small_sq: float, big_sq: float, b_small: float, b_big: float
) -> tuple[float, float]:
    """(tr Sigma, |G|^2) from |G_small|^2 = `small_sq` over `b_small` rows and |G_big|^2 =
    `big_sq` over `b_big` rows (b_big > b_small): McCandlish's unbiased pair."""
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    grad_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    return trace, grad_sq


def noise_figures(metrics: dict[str, float], g: torch.Tensor, rows: int) -> dict[str, float]:
    """The round's noise_trace, noise_grad_sq and noise_scale (FIGURES) from the gradient
    phase's averaged `metrics` (shard_metrics' keys), its mean `g`, and `rows` = sum_j b_j.

    sum_j w_j^2 / b_j = mean(n_j / b_j) / n, and n = rows / mean(b_j / n_j). Empty where the
    two sizes coincide (one shard) or the helper metrics are missing; no noise_scale where
    |G|^2's estimate is not positive.
    """
    if GRAD_SQ not in metrics:
        return {}
    total = rows / metrics[ROW_PER_SHARD]  # n
    b_small = 1.0 / metrics[INV_ROWS]
    b_big = total / metrics[SHARD_PER_ROW]
    if b_big <= b_small * (1.0 + 1e-9):
        return {}
    big_sq = float(g.double().pow(2).sum())
    trace, grad_sq = two_batch_estimate(metrics[GRAD_SQ], big_sq, b_small, b_big)
    figures = {"noise_trace": trace, "noise_grad_sq": grad_sq}
    scale = ratio(trace, grad_sq)
    return figures if scale is None else {**figures, "noise_scale": scale}


def ratio(trace: float | None, grad_sq: float | None) -> float | None:
    """B_simple = tr Sigma / |G|^2, or None where |G|^2's estimate is not positive (the
    gradient is lost in its noise: the ratio would be meaningless)."""
    if trace is None or grad_sq is None or grad_sq <= 0.0:
        return None
    return trace / grad_sq


def shard_gradient(objective: Objective, sample: Objective, w: torch.Tensor) -> LocalOutput:
    """A gradient phase's output on one shard: f_i(w) and g_i on `sample` (the shard, or a
    sample of it), with what the round's noise scale needs from it (no extra pass)."""
    loss, g_i = sample.loss_and_grad(w)
    rows = sample.num_samples
    metrics = {"train_loss": loss, **shard_metrics(g_i, rows, objective.num_samples)}
    return LocalOutput(tensors={"grad": g_i}, metrics=metrics, rows=rows)


def gradient_figures(mean: LocalOutput) -> dict[str, float]:
    """A gradient phase's round metrics from its average: grad_norm = ||g|| and FIGURES."""
    g = mean.tensors["grad"]
    return {"grad_norm": float(g.norm()), **noise_figures(mean.metrics, g, mean.rows)}
