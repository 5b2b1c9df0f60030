"""`--collective`: which form `auto` picks and why, the settings it refuses, and how the group
packs what it all-gathers (no cluster: the forms themselves run in tests/test_torch_*.py)."""

from __future__ import annotations

import pytest
import torch

from dask_dane.datasets.rows.features import ALIGNMENT
from dask_dane.pipeline.engine.round.group import pack, unpack
from dask_dane.pipeline.engine.round.tasks import RoundResult
from dask_dane.pipeline.engine.run.decisions import Selection
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import TORCH_MAX_BYTES, choose_collective


@pytest.mark.parametrize(
    ("settings", "model_bytes", "chosen"),
    [
        ({}, 150_000, "torch"),
        ({}, 2**20 + 1, "torch"),  # above the bound before the exchange (1 MiB)
        ({}, TORCH_MAX_BYTES, "torch"),
        ({}, TORCH_MAX_BYTES + 1, "dask"),
        # A former --broadcast value runs the all-gather as auto does: it asks for no form.
        ({"broadcast": "reduce"}, 150_000, "torch"),
        ({"broadcast": "tree"}, 150_000, "torch"),
        ({"collective": "torch"}, 50 * 2**20, "torch"),
        ({"collective": "dask"}, 150_000, "dask"),
    ],
)
def test_auto_takes_torch_for_models_up_to_its_bound_and_dask_otherwise(
    settings, model_bytes, chosen
):
    config = RunConfig(**settings).validate()

    collective, why = choose_collective(config, model_bytes)

    assert collective == chosen
    assert why.startswith(chosen)
    assert ("auto" in why) == ("collective" not in settings)


def test_torch_with_a_former_broadcast_value_is_accepted():
    # reduce no longer shapes a Dask graph's round, so it asks nothing of the torch group.
    config = RunConfig(collective="torch", broadcast="reduce").validate()

    assert choose_collective(config, 50 * 2**20)[0] == "torch"


def test_an_unknown_collective_is_one_line_and_exit_2(dane_here, tmp_path):
    done = dane_here("train", "--collective", "nccl", "--out", str(tmp_path / "run"), cwd=tmp_path)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--collective" in done.stderr and "torch" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_packed_value_comes_back_equal_with_its_tensors_on_the_boundary():
    # What a rank all-gathers: a RoundResult with float64, float32 and bfloat16 tensors of
    # sizes that are no multiple of 64 bytes, each unpacked as a view on a 64-byte boundary
    # (MKL's sums depend on where their operands start: features.on_boundary).
    value = RoundResult(
        weights=torch.arange(13, dtype=torch.float64),
        state={"v": torch.ones(5, dtype=torch.bfloat16)},
        metrics={"train_loss": 0.5},
        buffers={"running_mean": torch.full((3,), 2.5)},
    )

    buffer = pack(value)
    back = unpack(buffer)

    assert torch.equal(back.weights, value.weights)
    assert torch.equal(back.state["v"], value.state["v"])
    assert torch.equal(back.buffers["running_mean"], value.buffers["running_mean"])
    assert back.metrics == value.metrics
    for tensor in (back.weights, back.state["v"], back.buffers["running_mean"]):
        assert tensor.data_ptr() % ALIGNMENT == 0


def test_the_segments_selection_follows_the_drivers_rules():
    # Every rank decides alike where the driver would: a better validation accuracy selects
    # the round, --patience counts evaluated rounds without one, --stop-at-accuracy stops.
    selection = Selection(best_score=0.5, since_best=0, patience=2, stop_at_accuracy=0.9)
    worse = {"val_accuracy": 0.4, "val_loss": 1.0, "accuracy": 0.4}

    assert selection.would_select({"val_accuracy": 0.6, "val_loss": 1.0, "accuracy": 0.6})
    assert not selection.would_select(worse) and not selection.would_select(None)
    once = selection.advance(worse)
    assert once.since_best == 1 and not once.stops(worse)
    assert once.advance(worse).stops(worse)  # two evaluated rounds without a better one
    assert selection.stops({"val_accuracy": 0.95, "val_loss": 0.1, "accuracy": 0.9})
    assert selection.advance(None).since_best == 0  # a round not evaluated counts nothing
