"""`dane bench defaults` (issue 34, item 3): the training loss it measures after each round,
the spike it must catch, and the table it prints, on the digits store in this process."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dask_dane.bench.common.specs import spec_of
from dask_dane.bench.training import default_nets
from dask_dane.bench.training.defaults import (
    CANDIDATES,
    DefaultsSpec,
    judge,
    make_store,
    one_run,
)
from dask_dane.bench.training.defaults_report import markdown_table
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.setup.run_setup import prepare_run

pytestmark = pytest.mark.bench


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    spec = spec_of(DefaultsSpec, workdir=str(tmp_path_factory.mktemp("defaults")), rounds=2)
    return spec, make_store(spec, "digits")


def _plain_torch_loss(config, weights: torch.Tensor) -> float:
    """The full training loss in training mode, by a model of the same network built here,
    its parameters set from the flat vector in torch's own order. BatchNorm's statistics make
    a batch's loss depend on the batch, so f_i is defined over the local steps' batch size:
    ceil(n / B) near-equal batches, the mean over the shard's rows."""
    setup = prepare_run(config)
    model = default_nets.conv_bn(1, 10)
    nn.utils.vector_to_parameters(weights, model.parameters())
    model.train()
    total, rows = 0.0, 0
    with torch.no_grad():
        for i in range(setup.store.num_shards):
            shard = setup.load_train(i)
            n = len(shard.y)
            bounds = np.linspace(0, n, -(-n // config.batch_size) + 1).round().astype(int)
            for start, stop in itertools.pairwise(bounds.tolist()):
                logits = model(shard.x[start:stop])
                total += float(F.cross_entropy(logits, shard.y[start:stop], reduction="sum"))
            rows += n
    return total / rows


def test_the_losses_are_the_full_training_loss_at_each_rounds_weights(digits):
    spec, store = digits
    config = spec.configs(store, "conv_bn", "dane-paper", seed=0)

    run = one_run(config)
    weights = run_reference(prepare_run(config), rounds=2, num_workers=2).weights

    assert len(run["train_loss"]) == 3 and len(run["test_accuracy"]) == 2
    assert run["train_loss"][-1] == pytest.approx(_plain_torch_loss(config, weights), rel=1e-5)
    # The initial loss: about chance on 10 classes (ln 10 = 2.30), as an untrained net gives.
    assert run["train_loss"][0] == pytest.approx(2.3, abs=0.2)
    assert run["no_spike"] == (max(run["train_loss"][1:]) < run["train_loss"][0])
    assert run["survived"] == (run["no_spike"] and run["learned"])
    assert run["worst_ratio"] == pytest.approx(max(run["train_loss"][1:]) / run["train_loss"][0])


def test_a_run_thrown_off_by_its_steps_is_caught_as_a_spike(digits):
    spec, store = digits
    config = replace(spec.configs(store, "wide_conv", "dane-paper", seed=0), local_lr=3.0)

    run = one_run(config)

    assert not run["survived"]
    assert run["worst_ratio"] > 1


def test_candidates_pin_every_setting_they_change_and_the_study_tabulates_them(
    digits, tmp_path, dane_here
):
    spec, _ = digits
    # Plain DANE is written out in full: a later change of a default cannot change it.
    for name in ("dane-paper", "dane-mu0.1", "dane-backtrack"):
        assert {"eta", "mu", "correction", "safeguard", "local_clip"} <= set(CANDIDATES[name])
    out = tmp_path / "defaults.json"
    args = ["bench", "defaults", "--sources", "digits", "--models", "mlp,mlp_bn", "--rounds", "2"]
    args += ["--candidates", "dane-paper,fedavg", "--seeds", "0", "--workdir", spec.workdir]
    done = dane_here(*args, "--json", str(out), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert [(r["model"], r["candidate"]) for r in result["runs"]] == [
        ("mlp", "dane-paper"),
        ("mlp", "fedavg"),
        ("mlp_bn", "dane-paper"),
        ("mlp_bn", "fedavg"),
    ]
    assert result["verdict"]["fedavg"]["runs"] == 2
    table = markdown_table(result)
    assert "| dane-paper | " in table and "| digits | mlp_bn | " in table


def test_a_network_stuck_at_chance_has_not_spiked_but_has_not_survived():
    # Thrown to chance in round 1 (ln 10 = 2.30), just below its initial 2.37, and kept there.
    stuck = judge([2.368, 2.328, 2.305, 2.303, 2.304])
    assert stuck["no_spike"] and not stuck["learned"] and not stuck["survived"]
    spiked = judge([2.337, 5.062, 1.2, 0.9])
    assert not spiked["no_spike"] and spiked["learned"] and not spiked["survived"]
    assert spiked["worst_ratio"] == pytest.approx(5.062 / 2.337)
    assert judge([2.3, 0.5, 0.3])["survived"]
    assert not judge([2.3, float("nan"), 0.3])["survived"]


def test_an_unknown_candidate_is_named():
    with pytest.raises(ValueError, match="unknown \\['dane-typo'\\]"):
        DefaultsSpec(candidates=("dane-typo",)).validate()
