"""Models with buffers (BatchNorm): the statistics travel beside the weights, are combined as
FedAvg does, never touched by a server step, counted in the bytes, and used in evaluation."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import write_store
from dask_dane.models.flat import load_state
from dask_dane.models.registry import build_model
from dask_dane.pipeline.engine.protocol import LocalOutput
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.aggregate import (
    Partial,
    buffer_mean,
    sendable,
    shard_leaf,
    tree_reduce,
)
from dask_dane.pipeline.engine.round.shards import load_shard, make_objective
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_state, prepare_run


def bn_net(in_channels: int, num_classes: int) -> nn.Module:
    """BatchNorm and no dropout: every output is a function of the weights and the batch."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, num_classes),
    )


def _setup(store, algorithm="fedavg", **settings):
    values = dict(local_steps=1, local_lr=0.05, batch_size=16, momentum=0.0, rounds=1, seed=3)
    values.update(settings)
    config = RunConfig(store=str(store), model="tests:bn_net", algorithm=algorithm, **values)
    return prepare_run(config.validate(), builder=bn_net)


def _report(shard: int, rows: int, buffers: dict) -> Partial:
    output = LocalOutput(tensors={"weights": torch.zeros(1)})
    return shard_leaf(
        output=output, num_samples=rows, compute_s=0.0, worker="w", shard=shard, buffers=buffers
    )


def test_statistics_are_row_weighted_and_counters_take_the_maximum():
    reports = [
        _report(0, 10, {"m": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}),
        _report(1, 30, {"m": torch.tensor([5.0, 6.0]), "n": torch.tensor(5)}),
    ]

    combined = buffer_mean(tree_reduce([sendable(r) for r in reports]))

    assert torch.allclose(combined["m"], torch.tensor([4.0, 5.0]))  # (10*1 + 30*5) / 40
    assert combined["n"].item() == 5 and combined["n"].dtype == torch.int64


@pytest.fixture(scope="module")
def unequal_digits(tmp_path_factory):
    """Digits in 2 Dirichlet(1) shards of 813 and 625 rows, skewed in labels: a plain mean of
    the shards' statistics lands far from their row-weighted mean (the iid 719 and 718 rows
    of digits_stores[2] could not tell the two apart at rtol 1e-5)."""
    raw = load_source("digits", SourceOptions(seed=0))
    spec = PartitionSpec(kind="dirichlet", alpha=1.0, num_shards=2, seed=0)
    return write_store(raw, spec, tmp_path_factory.mktemp("bn") / "d.zarr", force=False).path


def _torch_statistics(setup) -> tuple[dict, dict]:
    """Each shard's running statistics after torch's own BatchNorm update on all its rows,
    as their row-weighted and their plain means."""
    shards = [load_shard(**setup.shard_args(i)) for i in range(2)]
    weighted, plain, rows = {}, {}, sum(len(shard.x) for shard in shards)
    for shard in shards:
        torch.manual_seed(setup.config.seed)
        model = build_model(setup.spec).train()
        model(shard.x.dense())
        for name, value in model.state_dict().items():
            if name.startswith("1.running"):
                weighted[name] = weighted.get(name, 0) + value * len(shard.x) / rows
                plain[name] = plain.get(name, 0) + value / 2
    return weighted, plain


def test_one_round_of_statistics_matches_plain_torch_per_shard(unequal_digits):
    # One local step over a whole shard (batch >= shard): each shard's running mean is torch's
    # own BatchNorm update on that shard's rows, and the round keeps their row-weighted mean.
    setup = _setup(unequal_digits, batch_size=10_000)
    expected, plain = _torch_statistics(setup)

    run = run_reference(setup, rounds=1, num_workers=2)

    for name, value in expected.items():
        torch.testing.assert_close(run.buffers[name], value, rtol=1e-5, atol=1e-6)
        # The premise: a plain mean misses by far more than the tolerance.
        assert (plain[name] - value).abs().max() > 20 * (1e-6 + 1e-5 * value.abs().max())
    assert run.buffers["1.num_batches_tracked"].item() == 1


def test_a_server_step_extrapolates_the_weights_and_never_the_buffers(unequal_digits):
    # s = 2.5: the weights go w + 2.5 (mean v_i - w); the statistics stay the shards'
    # row-weighted mean (a step applied to them would move them 2.5 times as far from b_0).
    plain_run = run_reference(_setup(unequal_digits, batch_size=10_000), rounds=1, num_workers=2)
    setup = _setup(unequal_digits, batch_size=10_000, server_lr=2.5)
    expected, _ = _torch_statistics(setup)
    w0 = initial_state(setup.spec, setup.config.seed)[0]

    run = run_reference(setup, rounds=1, num_workers=2)

    for name, value in expected.items():
        torch.testing.assert_close(run.buffers[name], value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(run.weights, w0 + 2.5 * (plain_run.weights - w0))
    assert (run.weights - plain_run.weights).abs().max() > 1e-3


def test_full_shard_gradient_is_over_the_local_steps_batches(digits_stores):
    # DANE's gradient phase: training mode, batches of --batch-size in the shard's order
    # (near-equal sizes), statistics untouched: torch's own train-mode loss, batch by batch.
    setup = _setup(digits_stores[2], algorithm="dane", batch_size=100)
    shard = load_shard(**setup.shard_args(0))
    weights, buffers = initial_state(setup.spec, 0)
    objective = make_objective(setup.spec, shard, buffers)

    loss, grad = objective.loss_and_grad(weights)

    torch.manual_seed(0)
    model = build_model(setup.spec).train()
    n = len(shard.x)
    count = -(-n // 100)
    bounds = torch.linspace(0, n, count + 1).round().long().tolist()
    total = sum(
        F.cross_entropy(model(shard.x[a:b]), shard.y[a:b], reduction="sum")
        for a, b in itertools.pairwise(bounds)
    )
    (total / n).backward()
    expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert loss == pytest.approx(float(total.detach() / n), rel=1e-6)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)
    assert torch.equal(objective.buffers["1.running_mean"], buffers["1.running_mean"])
    assert not objective.buffers_updated


def test_server_momentum_moves_the_weights_and_never_the_buffers(digits_stores):
    setup = _setup(digits_stores[2], server_momentum=0.9, rounds=3, local_steps=3)

    run = run_reference(setup, rounds=3, num_workers=2)

    assert all(bool((v > 0).all()) for k, v in run.buffers.items() if "running_var" in k)
    last = run.history[-1]
    assert last["test_accuracy"] > 0.2
    assert run.buffers["1.num_batches_tracked"].item() == 9


def test_evaluation_is_eval_mode_with_the_combined_statistics(digits_stores):
    setup = _setup(digits_stores[2], rounds=2, local_steps=5)
    run = run_reference(setup, rounds=2, num_workers=2)
    test = load_shard(**setup.test_args())

    model = load_state(build_model(setup.spec), run.weights, run.buffers).eval()
    with torch.no_grad():
        accuracy = (model(test.x.dense()).argmax(1) == test.y).double().mean().item()

    assert run.history[-1]["test_accuracy"] == pytest.approx(accuracy, abs=1e-12)


def test_buffer_bytes_are_counted_with_the_weights(digits_stores):
    setup = _setup(digits_stores[2])
    weights, buffers = initial_state(setup.spec, 0)

    run = run_reference(setup, rounds=1, num_workers=2)

    model = weights.numel() * 4 + sum(b.numel() * b.element_size() for b in buffers.values())
    # Each worker's sum, its buffers with it, to the other; no input moves: two copies on
    # two workers.
    expected = 2 * model
    assert run.history[0]["comm_bytes"] == expected
