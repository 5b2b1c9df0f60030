"""--precision bf16: layers computed in bfloat16 under autocast, weights and sums in float32."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train


def _logistic_shard(precision: str) -> tuple[ShardObjective, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(50, 20, generator=generator)
    y = torch.randint(0, 4, (50,), generator=generator)
    w = torch.randn(4 * 20 + 4, generator=generator)
    return ShardObjective(nn.Linear(20, 4), x, y, "classification", precision=precision), w


def test_bf16_loss_and_gradient_equal_an_explicit_bfloat16_computation():
    objective, w = _logistic_shard("bf16")
    # The oracle casts by hand what autocast casts: the linear layer's operands to bfloat16,
    # its output back to float32 for the loss; the gradient flows to float32 weights.
    # Chunk by chunk, as the objective bounds its memory: the float32 sum of bfloat16 parts.
    leaf = w.clone().requires_grad_(True)
    weight, bias = leaf[:80].view(4, 20), leaf[80:]
    expected = 0.0
    for start in range(0, 50, objective.chunk):
        x, y = (
            objective.x[start : start + objective.chunk],
            objective.y[start : start + objective.chunk],
        )
        logits = F.linear(x.bfloat16(), weight.bfloat16(), bias.bfloat16()).float()
        part = F.cross_entropy(logits, y, reduction="sum") / 50
        part.backward()
        expected += float(part.detach())

    loss, grad = objective.loss_and_grad(w)

    assert grad.dtype == torch.float32
    assert loss == pytest.approx(expected, rel=1e-6)
    torch.testing.assert_close(grad, leaf.grad, rtol=1e-6, atol=1e-7)
    exact_loss, exact_grad = _logistic_shard("fp32")[0].loss_and_grad(w)
    # The mode acts (bfloat16 keeps 8 bits of mantissa), and stays near the fp32 result.
    assert (grad - exact_grad).abs().max() > 1e-5
    assert torch.linalg.norm(grad - exact_grad) < 0.02 * torch.linalg.norm(exact_grad)
    assert loss == pytest.approx(exact_loss, rel=0.01)


def test_bf16_evaluation_scores_in_float32_from_bfloat16_layers():
    objective, w = _logistic_shard("bf16")
    logits = F.linear(
        objective.x.dense().bfloat16(), w[:80].view(4, 20).bfloat16(), w[80:].bfloat16()
    )
    accuracy = int((logits.float().argmax(dim=1) == objective.y).sum()) / 50

    _, correct, rows = objective.evaluate_sums(w)
    assert correct / rows == pytest.approx(accuracy, abs=1e-12)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"precision": "fp16"}, "--precision"),
        ({"precision": "bf16", "dtype": "float64"}, "--dtype float32"),
    ],
)
def test_bad_precision_is_refused_naming_the_fix(settings, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**settings).validate()


@pytest.mark.cluster
def test_bf16_dask_run_equals_the_reference_bit_for_bit(digits_stores, cluster_client, tmp_path):
    config = RunConfig(
        store=str(digits_stores[4]), out=str(tmp_path / "run"), algorithm="dane",
        model="small-cnn", rounds=3, seed=7, mu=0.1, local_steps=5, batch_size=16,
        precision="bf16", broadcast="allgather",
    ).validate()  # fmt: skip

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=3, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert weights.dtype == torch.float32
    assert torch.equal(weights, reference.weights)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in reference.history]
    fp32 = run_reference(prepare_run(replace(config, precision="fp32")), rounds=3, num_workers=2)
    assert not torch.equal(fp32.weights, reference.weights)  # the setting reached the workers


def test_bench_precision_times_both_precisions_from_the_same_start(digits_stores, tmp_path):
    from dask_dane.bench.common.specs import spec_of
    from dask_dane.bench.gpu.precision import PrecisionSpec, precision_table, run_precision

    spec = spec_of(PrecisionSpec, store=str(digits_stores[4]), model="small-cnn", steps=2,
                   repeats=2)  # fmt: skip

    result = run_precision(spec)

    rows = result["precisions"]
    assert list(rows) == ["fp32", "bf16", "plain"]
    assert all(len(row["runs_step_s"]) == 2 and row["step_s"] > 0 for row in rows.values())
    # Same weights, same minibatches: the losses differ only by the precision, and a little.
    fp32_loss, bf16_loss = rows["fp32"]["final_batch_loss"], rows["bf16"]["final_batch_loss"]
    assert fp32_loss != bf16_loss
    assert bf16_loss == pytest.approx(fp32_loss, rel=0.05)
    assert result["bf16_over_fp32"] == rows["bf16"]["step_s"] / rows["fp32"]["step_s"]
    # Plain PyTorch's steps on the module's own parameters: the same steps as the engine's.
    assert rows["plain"]["final_batch_loss"] == pytest.approx(fp32_loss, rel=1e-5)
    assert result["fp32_over_plain"] == rows["fp32"]["step_s"] / rows["plain"]["step_s"]
    assert "| bf16 | cpu |" in precision_table(result)


def test_bench_precision_refuses_zero_steps_in_one_line(
    run_cli, assert_one_line_error, capfd, tmp_path
):
    status = run_cli(["bench", "precision", "--store", str(tmp_path), "--steps", "0"])

    assert_one_line_error(status, capfd, ["--steps must be at least 1"])
