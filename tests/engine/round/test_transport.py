"""--transport bfloat16: the all-gather form's subtree sums travel in bfloat16, as deltas."""

from __future__ import annotations

import json

import pytest
import torch

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round import comm, transport
from dask_dane.pipeline.engine.round.aggregate import Partial
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import initial_weights, prepare_run
from dask_dane.pipeline.training import train


def _partial(weights: torch.Tensor, grad: torch.Tensor, rows: int) -> Partial:
    return Partial(
        tensor_sums={"weights": weights, "grad": grad}, metric_sums={"train_loss": 1.5},
        num_samples=rows, num_shards=2, compute_by_worker={"a": 0.1}, rows=rows,
        diagnostics={},
    )  # fmt: skip


def test_weights_travel_as_their_change_from_w_and_gradients_as_they_are():
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(1000, generator=generator)
    rows = 30
    solutions = rows * (w + 1e-3 * torch.randn(1000, generator=generator))  # sum of n_i v_i
    grad = torch.randn(1000, generator=generator)
    total = _partial(solutions, grad, rows)

    sent = transport.encode(total, w, "bfloat16")
    back = transport.decode(sent, w, "bfloat16")

    assert {t.dtype for t in sent.tensor_sums.values()} == {torch.bfloat16}
    # The oracle, written out: sum_i n_i (v_i - w) rounded to bfloat16, then n w added back.
    delta = (solutions - rows * w).to(torch.bfloat16).float()
    assert torch.equal(back.tensor_sums["weights"], delta + rows * w)
    assert torch.equal(back.tensor_sums["grad"], grad.to(torch.bfloat16).float())
    assert back.metric_sums == total.metric_sums and back.num_samples == rows
    # As a delta the error is bfloat16's 2^-9 of the step, not of the weights: 1000x less
    # here than sending v_i itself would make.
    step_error = (back.tensor_sums["weights"] - solutions).abs().max()
    plain_error = (solutions.to(torch.bfloat16).float() - solutions).abs().max()
    assert step_error < 2**-8 * (solutions - rows * w).abs().max()
    assert step_error * 100 < plain_error


def test_float32_transport_sends_the_sums_untouched():
    w = torch.ones(4)
    total = _partial(torch.full((4,), 3.0), torch.zeros(4), 3)

    assert transport.encode(total, w, "float32") is total
    assert transport.decode(total, w, "float32") is total
    assert transport.sent_bytes(total.tensor_sums, "float32") == 2 * 4 * 4
    assert transport.sent_bytes(total.tensor_sums, "bfloat16") == 2 * 4 * 2


def test_bad_transport_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="--transport"):
        RunConfig(transport="int4").validate()
    # Every --broadcast value encodes its sums, the former ones a RunConfig may be built with
    # included (they run the all-gather); an unknown one is refused naming today's values.
    for broadcast in ("auto", "allgather", "reduce", "direct", "tree"):
        RunConfig(transport="bfloat16", broadcast=broadcast).validate()
    with pytest.raises(ValueError, match=r"'gossip'; choose one of: auto, allgather$"):
        RunConfig(broadcast="gossip").validate()


def test_bfloat16_halves_the_counted_bytes_of_every_phase(digits_stores):
    # DANE, 4 shards on 2 workers, the all-gather form: each worker's one subtree sum to the
    # other in both phases, 4 model-sized copies a round, at 2 bytes an element.
    config = RunConfig(
        store=str(digits_stores[4]), model="small-cnn", rounds=2, local_steps=2,
        batch_size=16, seed=3, transport="bfloat16",
    ).validate()  # fmt: skip
    setup = prepare_run(config)
    params = initial_weights(setup.spec, 0).numel()

    rows = run_reference(setup, rounds=2, num_workers=2).history

    assert [r["comm_bytes"] for r in rows] == [4 * params * 2] * 2
    assert comm.layout(["a", "a", "b", "b"], transport="bfloat16").transport == "bfloat16"


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["dane", "fedavg", "scaffold"])
def test_bfloat16_dask_run_equals_the_reference_bit_for_bit(
    algorithm, digits_stores, cluster_client, tmp_path
):
    config = RunConfig(
        store=str(digits_stores[4]), out=str(tmp_path / "run"), algorithm=algorithm,
        model="small-cnn", rounds=3, seed=7, mu=0.1, local_steps=5, batch_size=16,
        transport="bfloat16", collective="dask",
    ).validate()  # fmt: skip

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=3, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, reference.weights)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in reference.history]
    assert [r["comm_bytes"] for r in rows] == [r["comm_bytes"] for r in reference.history]
    assert all(r["round_form"] == "dask" for r in rows)
    exact = run_reference(
        prepare_run(RunConfig(**{**config.as_dict(), "transport": "float32"})),
        rounds=3, num_workers=2,
    )  # fmt: skip
    assert not torch.equal(exact.weights, reference.weights)  # the encoding reached the sums
    assert (exact.weights - reference.weights).abs().max() < 1e-2
