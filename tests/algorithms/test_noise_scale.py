"""The gradient noise scale against an oracle: exact per-example gradients of a small model.

Multinomial logistic regression on 320 rows of the digits (64 pixels, 10 classes, 650
weights) at fixed weights. Every row's gradient is computed on its own (torch.func's
vmap(grad), independent of the pipeline), so tr(Sigma) and |G|^2 are known exactly. For a
random partition of those N rows into shards, with each shard's whole gradient (DANE's
default), the estimator's expectation is exact (algorithms/parts/noise_scale.py): tr C for
the rows' sample covariance C (normalised by N - 1), and |G_N|^2 - tr C / N for |G|^2.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dask_dane.pipeline.algorithms.parts import noise_scale as ns
from dask_dane.pipeline.algorithms.parts.gradient_estimate import GradientEstimate
from dask_dane.pipeline.engine.protocol import LocalContext
from dask_dane.pipeline.engine.round.aggregate import (
    mean_of,
    sendable,
    shard_leaf,
    tree_reduce,
)
from dask_dane.pipeline.engine.round.objective import ShardObjective

ROWS, FEATURES, CLASSES = 320, 64, 10


@pytest.fixture(scope="module")
def problem():
    """(x, y, w, per-example gradients P) for logistic regression on digits rows."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data[:ROWS] / 16.0, dtype=torch.float64)
    y = torch.tensor(digits.target[:ROWS], dtype=torch.int64)
    # Weights a little way into training, so that |G|^2 is not the start's large value alone.
    w = 0.05 * torch.randn(CLASSES * FEATURES + CLASSES, generator=torch.Generator().manual_seed(3))
    return x, y, w.double(), _per_example_gradients(x, y, w.double())


def _per_example_gradients(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row r's gradient of its own cross-entropy, (N, d), weights laid out as nn.Linear's
    flat (weight, then bias)."""
    from torch.func import grad, vmap

    def loss(flat: torch.Tensor, row: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        weight = flat[: CLASSES * FEATURES].view(CLASSES, FEATURES)
        logits = row @ weight.T + flat[CLASSES * FEATURES :]
        return nn.functional.cross_entropy(logits[None], label[None])

    return vmap(grad(loss), in_dims=(None, 0, 0))(w, x, y)


def _truth(per_example: torch.Tensor) -> tuple[float, float, float]:
    """(tr C, E[|G|^2 estimate], tr C^2): the sample covariance's trace, the expectation of
    the |G|^2 estimate over random partitions, and tr C^2 for the estimator's spread."""
    n = per_example.shape[0]
    centred = per_example - per_example.mean(0)
    gram = centred @ centred.T / (n - 1)
    trace = float(torch.trace(gram))
    return trace, float(per_example.mean(0).pow(2).sum()) - trace / n, float(gram.pow(2).sum())


def _estimate(
    per_example: torch.Tensor, shards: list[torch.Tensor], sample: int = 0
) -> dict[str, float]:
    """The pipeline's reduction on plain tensors: each shard's mean gradient (over its first
    `sample` rows, as --grad-sample takes them; 0: all), its shard_metrics, the means
    weighted by the shards' sizes, then noise_figures."""
    sizes = torch.tensor([len(rows) for rows in shards], dtype=torch.float64)
    weights = sizes / sizes.sum()
    used = [rows[:sample] if sample else rows for rows in shards]
    grads = [per_example[rows].mean(0) for rows in used]
    pairs = zip(grads, used, shards, strict=True)
    each = [ns.shard_metrics(g, len(u), len(r)) for g, u, r in pairs]
    mean = {k: sum(float(wj) * m[k] for wj, m in zip(weights, each, strict=True)) for k in each[0]}
    g = sum(float(wj) * gj for wj, gj in zip(weights, grads, strict=True))
    return ns.noise_figures(mean, g, sum(len(u) for u in used))


def _random_shards(sizes: list[int], generator: torch.Generator) -> list[torch.Tensor]:
    order = torch.randperm(sum(sizes), generator=generator)
    return list(order.split(sizes))


def _objective(x: torch.Tensor, y: torch.Tensor) -> ShardObjective:
    return ShardObjective(nn.Linear(FEATURES, CLASSES).double(), x, y, "classification")


def test_the_pipelines_gradient_phase_estimates_within_its_own_spread(problem):
    # prepare: 4 iid shards of 80 rows, their gradient phase as DANE runs it
    x, y, w, per_example = problem
    shards = _random_shards([80] * 4, torch.Generator().manual_seed(0))
    reports = []
    for j, rows in enumerate(shards):
        objective = _objective(x[rows], y[rows])
        ctx = LocalContext(phase=0, round_index=1, objective=objective, weights=w,
                           received={}, previous=None, rng=torch.Generator())  # fmt: skip
        output = GradientEstimate().local_gradient(ctx)
        reports.append(shard_leaf(output=output, num_samples=len(rows), compute_s=0.0,
                                   worker="w", shard=j))  # fmt: skip
    # act: the phase's weighted mean, then the figures the broadcast reports
    mean = mean_of(tree_reduce([sendable(r) for r in reports]))
    figures = ns.noise_figures(mean.metrics, mean.tensors["grad"], mean.rows)
    # assert: the same as the plain-tensor reduction of the oracle's gradients, and within
    # 4 standard deviations of the truth. For m shards of b rows, S ~ b m/(m-1) mean_j
    # |g_j - g|^2, and with Gaussian g_j of covariance C/b, Var|g_j - g|^2 ~ 2 tr C^2 / b^2:
    # sd(S) ~ sqrt(2 m tr C^2) / (m - 1) (the finite-population correction only shrinks it).
    assert torch.allclose(mean.tensors["grad"], per_example.mean(0), atol=1e-12)
    plain = _estimate(per_example, shards)
    assert figures["noise_trace"] == pytest.approx(plain["noise_trace"], rel=1e-9)
    assert figures["noise_grad_sq"] == pytest.approx(plain["noise_grad_sq"], rel=1e-9)
    trace, _, trace_sq = _truth(per_example)
    m = len(shards)
    assert abs(figures["noise_trace"] - trace) < 4 * math.sqrt(2 * m * trace_sq) / (m - 1)
    assert figures["noise_scale"] == figures["noise_trace"] / figures["noise_grad_sq"]


@pytest.mark.parametrize(
    ("sizes", "sample"),
    [([80] * 4, 0), ([40] * 8, 0), ([20, 60, 100, 140], 0), ([20, 60, 100, 140], 16)],
)
def test_the_estimator_is_unbiased_over_random_partitions(problem, sizes, sample):
    # prepare: many random partitions of the same rows (equal and unequal shards)
    _, _, _, per_example = problem
    generator = torch.Generator().manual_seed(1)
    draws = 3000
    # act
    estimates = [
        _estimate(per_example, _random_shards(sizes, generator), sample) for _ in range(draws)
    ]
    traces = torch.tensor([e["noise_trace"] for e in estimates])
    grad_sqs = torch.tensor([e["noise_grad_sq"] for e in estimates])
    # assert: each mean within 4 standard errors of its exact expectation (the same for a
    # sample of every shard: the derivation in noise_scale.py holds for disjoint samples).
    # Swapping b_small and B_big flips tr Sigma's sign; taking B_big as the rows read, m b,
    # on unequal shards with equal samples (B_big = b / sum_j w_j^2) misses by a third.
    trace, grad_sq, trace_sq = _truth(per_example)
    assert abs(float(traces.mean()) - trace) < 4 * float(traces.std()) / math.sqrt(draws)
    assert abs(float(grad_sqs.mean()) - grad_sq) < 4 * float(grad_sqs.std()) / math.sqrt(draws)
    if (
        len(set(sizes)) == 1 and not sample
    ):  # the analytic spread the single-estimate test relies on
        m = len(sizes)
        assert float(traces.std()) < math.sqrt(2 * m * trace_sq) / (m - 1)


def test_one_shard_or_no_helpers_gives_no_estimate():
    g = torch.ones(3)
    one = ns.shard_metrics(g, 50, 50)
    assert ns.noise_figures(one, g, 50) == {}
    assert ns.noise_figures({"train_loss": 1.0}, g, 50) == {}


def test_a_gradient_lost_in_its_noise_has_no_ratio():
    # |G_small|^2 = 2 over 10 rows, |G_big|^2 = 0.1 over 40: |G|^2's estimate is negative
    trace, grad_sq = ns.two_batch_estimate(2.0, 0.1, 10, 40)
    assert trace == pytest.approx(1.9 / (0.1 - 0.025))
    assert grad_sq == pytest.approx((40 * 0.1 - 10 * 2.0) / 30)
    assert grad_sq < 0 and ns.ratio(trace, grad_sq) is None
    assert ns.ratio(trace, 0.0) is None and ns.ratio(None, 1.0) is None


@pytest.mark.parametrize(
    ("algorithm", "settings", "measured"),
    [
        ("dane", dict(local_steps=3, mu=0.1), True),
        ("sgd", dict(local_lr=0.1), True),
        ("gd", dict(local_lr=0.1), True),
        ("fedavg", dict(local_steps=3), False),
    ],
)
def test_every_row_holds_the_noise_scale_where_the_round_measures_it(
    algorithm, settings, measured, digits_stores, tmp_path
):
    from dask_dane.pipeline.engine.reference import run_reference
    from dask_dane.pipeline.setup.config import RunConfig
    from dask_dane.pipeline.setup.run_setup import prepare_run

    config = RunConfig(store=str(digits_stores[4]), out=str(tmp_path), algorithm=algorithm,
                       model="mlp", rounds=3, seed=5, batch_size=16, **settings)  # fmt: skip
    rows = run_reference(prepare_run(config.validate()), rounds=3, num_workers=2).history

    for row in rows:
        assert {"noise_scale", "noise_trace", "noise_grad_sq", "noise_scale_ema"} <= set(row)
        assert not [key for key in row if key.startswith("_")]  # the helper sums stay out
        assert (row["noise_trace"] is not None) == measured
    if measured:  # positive, and the smoothed one from the smoothed parts
        assert all(row["noise_trace"] > 0 for row in rows)
        last = rows[-1]
        assert last["noise_scale_ema"] == last["noise_trace_ema"] / last["noise_grad_sq_ema"]


def test_the_smoothed_noise_scale_averages_numerator_and_denominator_apart():
    from dask_dane.pipeline.algorithms.parts.row_figures import NOISE_EMA_DECAY as beta
    from dask_dane.pipeline.algorithms.parts.row_figures import smoothed_noise

    first = smoothed_noise(None, {"noise_trace": 10.0, "noise_grad_sq": 1.0})
    second = smoothed_noise(first, {"noise_trace": 30.0, "noise_grad_sq": -0.5})
    carried = smoothed_noise(second, {})  # a round without figures keeps the averages

    assert first["noise_scale_ema"] == 10.0
    trace, grad_sq = beta * 10 + (1 - beta) * 30, beta * 1 + (1 - beta) * -0.5
    assert second["noise_trace_ema"] == pytest.approx(trace)
    assert second["noise_scale_ema"] == pytest.approx(trace / grad_sq)  # not a mean of ratios
    assert carried == second
    assert smoothed_noise(None, {})["noise_scale_ema"] is None
