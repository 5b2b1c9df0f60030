"""The divergence error says what is not finite, the training loss, the weights or both, and
shows the loss only where the loss is the non-finite thing."""

from __future__ import annotations

import math

import pytest
import torch

from dask_dane.pipeline.engine.round.tasks import RoundResult
from dask_dane.pipeline.engine.round.worker import NO_WEIGHTS
from dask_dane.pipeline.engine.run.errors import TrainingDiverged
from dask_dane.pipeline.engine.run.run_state import check_finite
from dask_dane.pipeline.engine.run.rundir import RunDir

FINITE = torch.ones(4)
NAN_WEIGHTS = torch.tensor([1.0, math.nan, 2.0, 3.0])


def _message(tmp_path, *, loss: float | None, weights: torch.Tensor, finite: bool) -> str:
    metrics = {} if loss is None else {"train_loss": loss}
    result = RoundResult(weights=weights, state=None, metrics=metrics)
    with pytest.raises(TrainingDiverged) as raised:
        check_finite(result, 7, RunDir(tmp_path), 5, finite)
    return str(raised.value)


def test_weights_gone_non_finite_under_a_finite_loss_name_the_weights_only(tmp_path):
    message = _message(tmp_path, loss=0.4123, weights=NAN_WEIGHTS, finite=False)

    assert message.startswith("training diverged in round 7: the weights are not finite; ")
    assert "0.4123" not in message and "train_loss" not in message
    assert "(round 5) is kept in" in message
    assert message.endswith("try a larger --mu or a smaller --local-lr")


def test_weights_fetched_without_their_values_are_named_from_the_flag(tmp_path):
    message = _message(tmp_path, loss=0.4123, weights=NO_WEIGHTS, finite=False)

    assert message.startswith("training diverged in round 7: the weights are not finite; ")
    assert "0.4123" not in message


def test_a_non_finite_loss_over_finite_weights_names_the_loss_only(tmp_path):
    # segments.py folds the loss into `finite`: False here although the weights are finite
    message = _message(tmp_path, loss=math.inf, weights=FINITE, finite=False)

    assert message.startswith("training diverged in round 7: train_loss is inf; ")
    assert "weights" not in message


def test_both_non_finite_name_both(tmp_path):
    message = _message(tmp_path, loss=math.nan, weights=NAN_WEIGHTS, finite=False)

    assert message.startswith(
        "training diverged in round 7: train_loss is nan and the weights are not finite; "
    )


def test_a_finite_round_passes(tmp_path):
    result = RoundResult(weights=FINITE, state=None, metrics={"train_loss": 0.5})

    assert check_finite(result, 1, RunDir(tmp_path), 0, True) is None
