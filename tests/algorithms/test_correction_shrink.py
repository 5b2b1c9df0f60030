"""DANE's shrunk correction (issue 25): the factor against its formula and its known noise.

The model is a quadratic with known noise: f_i(p) = mean_r ||p - z_r||^2 over rows z_r = mu_i +
sigma * e_r, so the per-row gradient 2 (p - z_r) has covariance 4 sigma^2 I and every gradient
is a line of numpy. The strategy's own phases run on these shards, averaged by the pipeline's
aggregation; numpy recomputes the half-samples, the variances and the factor independently.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dask_dane.pipeline.algorithms.dane import Dane
from dask_dane.pipeline.algorithms.parts import correction as cr
from dask_dane.pipeline.algorithms.parts.gradient_estimate import GradientEstimate
from dask_dane.pipeline.algorithms.parts.local_solver import LocalSolver
from dask_dane.pipeline.engine.protocol import LocalContext
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.aggregate import (
    mean_of,
    sendable,
    shard_leaf,
    tree_reduce,
)
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run

SAMPLE, SEED, SIGMA = 60, 5, 0.5


class Point(nn.Module):
    """The same output p for every row: the model of f_i(p) = mean_r ||p - z_r||^2."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.zeros(dim, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p.expand(x.shape[0], -1)


def _shards(dim: int, sizes: list[int], means: list[float], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [m + SIGMA * rng.standard_normal((n, dim)) for n, m in zip(sizes, means, strict=True)]


def _objective(z: np.ndarray) -> ShardObjective:
    x = torch.zeros((len(z), 1), dtype=torch.float64)
    return ShardObjective(Point(z.shape[1]), x, torch.from_numpy(z), "regression")


def _dane(grad_sample: int, eta: float = 1.0) -> Dane:
    solver = LocalSolver(local_steps=1, local_lr=0.1, batch_size=8)
    gradient = GradientEstimate(grad_sample=grad_sample, correction="shrink", seed=SEED)
    return Dane(eta=eta, mu=0.0, solver=solver, gradient=gradient, seed=SEED)


def _factors(strategy: Dane, shards: list[np.ndarray], p: torch.Tensor) -> list[float]:
    """Each shard's factor, from the strategy's phase 0, the pipeline's weighted mean and the
    broadcast, as a round computes them."""
    objectives = [_objective(z) for z in shards]
    outputs = [strategy.local(_context(0, objective, p, {}, None)) for objective in objectives]
    reports = [
        shard_leaf(output=out, num_samples=o.num_samples, compute_s=0.0, worker="w", shard=i)
        for i, (out, o) in enumerate(zip(outputs, objectives, strict=True))
    ]
    broadcast = strategy.broadcast(0, mean_of(tree_reduce([sendable(r) for r in reports])), None)
    return [
        strategy.gradient.linear(
            _context(1, o, p, broadcast.tensors, out), broadcast.tensors["grad"], strategy.eta
        )[1]
        for o, out in zip(objectives, outputs, strict=True)
    ]


def _context(phase, objective, p, received, previous) -> LocalContext:
    return LocalContext(phase=phase, round_index=1, objective=objective, weights=p,
                        received=received, previous=previous,
                        rng=torch.Generator().manual_seed(0))  # fmt: skip


def _numpy_factors(shards: list[np.ndarray], p: np.ndarray, sample: int) -> list[float]:
    """The factors by the formula of correction.py, from the sampled rows alone. The sample's
    gradient is the mean over all its rows; its halves (floor(N/2) rows, then the rest) give
    the per-row variance from Var(g_a - g_b) = s^2 (1/h_a + 1/h_b), whatever N's parity."""
    sizes = np.array([len(z) for z in shards], dtype=float)
    weights = sizes / sizes.sum()
    grads, variances = [], []
    for z in shards:
        rows = np.sort(torch.randperm(len(z), generator=torch.Generator().manual_seed(SEED))
                       [:sample].numpy())  # fmt: skip
        first, second = z[rows[: sample // 2]], z[rows[sample // 2 :]]
        g_a, g_b = 2 * (p - first.mean(axis=0)), 2 * (p - second.mean(axis=0))
        grads.append(2 * (p - z[rows].mean(axis=0)))
        per_row = np.sum((g_a - g_b) ** 2) / (1 / len(first) + 1 / len(second))
        variances.append(per_row / sample * (1 - sample / len(z)))
    g = sum(w * gi for w, gi in zip(weights, grads, strict=True))
    global_variance = sum(w**2 * v for w, v in zip(weights, variances, strict=True))
    return [
        max(0.0, 1 - ((1 - 2 * w) * v + global_variance) / np.sum((gi - g) ** 2))
        for w, v, gi in zip(weights, variances, grads, strict=True)
    ]


@pytest.mark.parametrize("sample", [SAMPLE, SAMPLE + 1], ids=["even", "odd"])
def test_the_factor_is_the_james_stein_formula_on_unequal_shards(sample):
    # Unequal shards with a little signal each: factors strictly between 0 and 1, where an
    # error in any term of the formula (a weight, a half, the finite-population term) shows.
    # An odd sample splits into halves of 30 and 31 rows, which an even one cannot tell from
    # halves weighted 1/2 each.
    shards = _shards(dim=40, sizes=[400, 250, 120], means=[0.0, 0.08, -0.05])
    p = torch.full((40,), 0.3, dtype=torch.float64)

    factors = _factors(_dane(sample), shards, p)

    expected = _numpy_factors(shards, p.numpy(), sample)
    assert all(0.05 < f < 0.95 for f in expected), expected
    np.testing.assert_allclose(factors, expected, rtol=1e-10)


def test_the_variance_estimate_matches_the_known_noise():
    # tr Var(g_i) = 4 d sigma^2 / N (1 - N / n) for N sampled of n rows; in 4000 dimensions
    # the two-half estimate concentrates within a few per cent of it.
    dim, rows = 4000, 300
    z = _shards(dim=dim, sizes=[rows], means=[0.0], seed=1)[0]
    sample = _objective(z).fixed_sample(SAMPLE, SEED)
    p = torch.zeros(dim, dtype=torch.float64)

    _, grad, variance = cr.sampling_variance(sample, rows, p)

    truth = 4 * dim * SIGMA**2 / SAMPLE * (1 - SAMPLE / rows)
    assert variance == pytest.approx(truth, rel=0.08)
    torch.testing.assert_close(grad, sample.loss_and_grad(p)[1], rtol=1e-12, atol=1e-12)


def test_noise_falls_to_zero_and_signal_stays_near_one():
    # iid shards of 3000 rows: d_i is nearly all sampling noise (the shards' true means
    # differ by 1/3000 of the per-row variance, the samples' by 1/60), so the factor falls
    # near 0 and the solve is local SGD's. Means far from their mean (2/3): near 1.
    p = torch.zeros(400, dtype=torch.float64)
    iid = _factors(_dane(SAMPLE), _shards(400, [3000] * 3, [0.0, 0.0, 0.0]), p)
    skewed = _factors(_dane(SAMPLE), _shards(400, [3000] * 3, [-1.0, 1.0, 2.0]), p)

    assert max(iid) < 0.08
    assert min(skewed) > 0.97


def test_the_whole_shard_gives_factor_one_and_the_papers_dane_bit_for_bit(digits_stores):
    # No sample: the correction is exact, V_i = 0 and alpha_i = 1, and the run is plain DANE's.
    common = dict(store=str(digits_stores[2]), rounds=2, seed=4, local_steps=3, eta=0.7, mu=0.1)
    runs = {
        name: run_reference(
            prepare_run(RunConfig(correction=name, **common).validate()), rounds=2, num_workers=2
        )
        for name in ("plain", "shrink")
    }

    assert torch.equal(runs["plain"].weights, runs["shrink"].weights)
    factors = [s["correction_factor"] for row in runs["shrink"].history for s in row["shards"]]
    assert factors == [1.0] * 4


def test_a_sampled_gradient_shrinks_every_shards_correction_and_changes_the_run(digits_stores):
    # The factors are each shard's own (its sample against the round's all-gathered mean
    # gradient, which every algorithm's Dask = reference test crosses): no cluster of its own.
    common = dict(store=str(digits_stores[4]), dtype="float64", rounds=3, seed=7, eta=1.0,
                  mu=0.1, local_steps=5, batch_size=16, grad_sample=100)  # fmt: skip
    runs = {
        name: run_reference(
            prepare_run(RunConfig(correction=name, **common).validate()), rounds=3, num_workers=2
        )
        for name in ("plain", "shrink")
    }

    factors = [[s["correction_factor"] for s in row["shards"]] for row in runs["shrink"].history]
    assert [len(round_factors) for round_factors in factors] == [4, 4, 4]
    assert all(0.0 <= f < 1.0 for round_factors in factors for f in round_factors)
    assert not torch.equal(runs["plain"].weights, runs["shrink"].weights)


def test_the_shrunk_term_keeps_the_global_part_of_the_correction_whole():
    # alpha_i scales only g_i - g; with eta != 1 the (1 - eta) g part of the paper's term
    # stays, and factor 1 is the paper's term itself.
    own, mean = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.5, 1.0, -1.0])

    shrunk = cr.shrunk_linear(own, mean, eta=0.7, factor=0.25)

    torch.testing.assert_close(shrunk, 0.25 * (own - mean) + 0.3 * mean)
    torch.testing.assert_close(cr.shrunk_linear(own, mean, eta=0.7, factor=1.0), own - 0.7 * mean)
