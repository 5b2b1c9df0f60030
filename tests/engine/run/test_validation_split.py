"""The validation split (issue 35 item 1): a stratified, seeded slice of each shard's training
rows, held out at train time, removed identically wherever a shard is loaded."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.shards import held_out_rows, load_shard, part_positions
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.decisions import stops_early
from dask_dane.pipeline.engine.run.metrics import read_metrics
from dask_dane.pipeline.engine.run.run_state import RunState
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.observe.progress import selection_line
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.resumed import check_same_run
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train


def _labels(counts: list[int], seed: int = 0) -> np.ndarray:
    """Labels with counts[c] rows of class c, shuffled as a shard's are."""
    y = np.concatenate([np.full(n, c, dtype=np.int64) for c, n in enumerate(counts)])
    return np.random.default_rng(seed).permutation(y)


def test_each_class_gives_its_share_of_the_held_out_rows():
    y = _labels([50, 30, 20])

    held = held_out_rows(y, 0.1, seed=3, index=0)

    assert np.bincount(y[held], minlength=3).tolist() == [5, 3, 2]


def test_shares_that_do_not_divide_go_to_the_largest_remainders():
    y = _labels([7, 7, 6])  # 0.25 * 20 = 5: exact shares 1.75, 1.75, 1.5

    held = held_out_rows(y, 0.25, seed=0, index=1)

    assert np.bincount(y[held], minlength=3).tolist() == [2, 2, 1]


def test_the_split_is_seeded_by_the_run_seed_and_the_shard():
    y = _labels([40, 40])

    same = held_out_rows(y, 0.2, seed=5, index=2), held_out_rows(y, 0.2, seed=5, index=2)
    other_seed = held_out_rows(y, 0.2, seed=6, index=2)
    other_shard = held_out_rows(y, 0.2, seed=5, index=3)

    assert np.array_equal(*same)
    assert not np.array_equal(same[0], other_seed)
    assert not np.array_equal(same[0], other_shard)


def test_train_and_val_parts_are_disjoint_and_together_the_shard_in_order():
    y = _labels([30, 20, 10])
    x = np.arange(len(y), dtype=np.float32)[:, None]  # each row's position as its feature

    train, val = (part_positions(y, part, 0.3, seed=1, index=0) for part in ("train", "val"))
    train_x, val_x, val_y = x[train], x[val], y[val]

    kept, held = train_x[:, 0].astype(int), val_x[:, 0].astype(int)
    assert len(held) == 18 and len(kept) == 42
    assert set(kept).isdisjoint(held) and sorted([*kept, *held]) == list(range(60))
    assert list(kept) == sorted(kept)  # training rows keep the store's order
    assert np.array_equal(val_y, y[held])


def test_a_shard_keeps_a_row_to_train_on_and_regression_targets_split_too():
    one_class = np.zeros(3, dtype=np.int64)
    targets = np.linspace(0.0, 1.0, 10)

    assert len(held_out_rows(one_class, 0.9, seed=0, index=0)) == 2
    assert len(held_out_rows(targets, 0.3, seed=0, index=0)) == 3
    assert len(held_out_rows(targets, 0.0, seed=0, index=0)) == 0


def test_loaded_shards_hold_out_the_same_rows_as_the_split_says(digits_stores):
    setup = prepare_run(RunConfig(store=str(digits_stores[2]), val_fraction=0.2, seed=4))
    plain = prepare_run(RunConfig(store=str(digits_stores[2]), val_fraction=0.0, seed=4))

    everything = [plain.load_train(i) for i in range(2)]
    train = [setup.load_train(i) for i in range(2)]
    val = setup.load_evaluation().held_out

    for i, (whole, kept) in enumerate(zip(everything, train, strict=True)):
        held = held_out_rows(whole.y.numpy(), 0.2, seed=4, index=i)
        keep = np.setdiff1d(np.arange(len(whole.y)), held)
        assert torch.equal(kept.x.dense(), whole.x.dense()[keep])
        assert torch.equal(kept.y, whole.y[keep])
    assert len(val.y) + sum(len(s.y) for s in train) == sum(len(s.y) for s in everything)
    first = held_out_rows(everything[0].y.numpy(), 0.2, seed=4, index=0)
    assert torch.equal(val.y[: len(first)], everything[0].y[first])


def test_a_read_of_other_rows_splits_those_rows_not_a_stale_list(digits_stores):
    setup = prepare_run(RunConfig(store=str(digits_stores[2]), val_fraction=0.5))
    args = {**setup.shard_args(1), "start": 0, "stop": 4}  # bench/scaling/introspect.py does this

    assert len(load_shard(**args).y) == 2


def test_val_fraction_outside_0_1_is_one_line_with_the_fix(run_cli, capfd, assert_one_line_error):
    status = run_cli(["train", "--val-fraction", "1.5", "--rounds", "1"])

    assert_one_line_error(status, capfd, ["--val-fraction", "[0, 1)", "1.5"])


def test_a_resume_may_not_change_the_split():
    saved = RunConfig(store="s.zarr", val_fraction=0.1).as_dict()

    with pytest.raises(ValueError, match=r"val_fraction = 0\.1, not 0\.2"):
        check_same_run(saved, RunConfig(store="s.zarr", val_fraction=0.2))


def _advance(state: RunState, evaluation: dict | None) -> bool:
    """RunState.advance of a round that changed nothing but was evaluated as given."""
    nothing = SimpleNamespace(
        weights=state.weights,
        buffers={},
        state=None,
        shard_states=None,
        comm_bytes=0,
        comm_phases=0,
        rows=0,
        metrics={},  # no gradient phase: no noise scale
    )
    return state.advance(nothing, evaluation).is_best


def test_selection_takes_the_best_validation_round_and_patience_counts_from_it():
    state = RunState(round=0, weights=torch.zeros(1), state=None)
    config = RunConfig(store="s.zarr", patience=2)
    val = [0.5, 0.6, 0.6, None, 0.55, 0.7]  # None: a round without evaluation
    stops = []

    for t, accuracy in enumerate(val, start=1):
        evaluation = (
            None
            if accuracy is None
            else {"loss": 1.0, "accuracy": t / 10, "val_loss": 1.0, "val_accuracy": accuracy}
        )
        best = _advance(state, evaluation)
        row = {"val_loss": None if evaluation is None else 1.0, "val_accuracy": accuracy}
        stops.append((t, best, stops_early(config, row, state.since_best)))

    assert stops[:5] == [
        (1, True, False),
        (2, True, False),
        (3, False, False),
        (4, False, False),
        (5, False, True),  # rounds 3 and 5: two evaluated rounds without a better one
    ]
    assert (state.best_round, state.test_accuracy_at_best) == (6, 0.6)


def test_regression_selects_on_the_lowest_validation_loss():
    state = RunState(round=0, weights=torch.zeros(1), state=None)

    picked = [_advance(state, {"loss": 9.0, "val_loss": v}) for v in (3.0, 2.0, 2.5, 1.0)]

    assert picked == [True, True, False, True] and state.best_round == 4


def _run(tmp_path, store, client, name: str, **settings) -> tuple[list[dict], dict, dict]:
    """A short FedAvg MLP run on the Dask cluster: its rows, summary.json and best.pt."""
    base = dict(model="mlp", algorithm="fedavg", seed=3, local_steps=3, batch_size=16)
    config = RunConfig(store=str(store), out=str(tmp_path / name), **{**base, **settings})
    train(config.validate(), client=client)
    run = RunDir(tmp_path / name)
    rows = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    summary = json.loads((run.root / "summary.json").read_text())
    return rows, summary, load_checkpoint(run.best)


@pytest.mark.cluster
def test_dask_trains_on_the_same_kept_rows_as_the_reference(
    digits_stores, cluster_client, tmp_path
):
    settings = dict(store=str(digits_stores[4]), model="mlp", algorithm="fedavg", seed=3)
    config = RunConfig(
        **settings,
        out=str(tmp_path / "run"),
        rounds=2,
        local_steps=3,
        batch_size=16,
        val_fraction=0.25,
    ).validate()
    all_rows = RunConfig(
        **settings, rounds=2, local_steps=3, batch_size=16, val_fraction=0.0
    ).validate()

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)
    on_all_rows = run_reference(prepare_run(all_rows), rounds=2, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, reference.weights)
    assert (weights - on_all_rows.weights).abs().max() > 1e-4  # the held-out rows were left out
    rows = read_metrics(RunDir(tmp_path / "run").metrics)
    for row, expected in zip(rows, reference.history, strict=True):
        for key in ("val_loss", "val_accuracy", "test_loss", "test_accuracy"):
            assert row[key] == expected[key] and row[key] is not None


@pytest.mark.cluster
def test_best_pt_is_the_best_validation_round_and_patience_stops_after_it(
    digits_stores, cluster_client, tmp_path
):
    store = digits_stores[2]
    rows, summary, best = _run(
        tmp_path, store, cluster_client, "all", rounds=6, val_fraction=0.2, local_lr=0.5
    )
    val = [row["val_accuracy"] for row in rows]
    chosen = val.index(max(val)) + 1
    # --patience 1 stops at the first round that does not beat every earlier one.
    stop = next((t for t in range(2, 7) if val[t - 1] <= max(val[: t - 1])), 6)

    patient, _, _ = _run(
        tmp_path,
        store,
        cluster_client,
        "patient",
        rounds=6,
        val_fraction=0.2,
        local_lr=0.5,
        patience=1,
    )

    assert 1 < chosen < 6 and stop < 6  # the run peaks inside it: best.pt is not the last
    assert best["round"] == chosen and summary["best_round"] == chosen
    assert [row["is_best"] for row in rows].count(True) >= 1 and rows[chosen - 1]["is_best"]
    assert summary["selected_on"] == "validation"
    assert summary["test_accuracy_at_best"] == rows[chosen - 1]["test_accuracy"]
    assert len(patient) == stop
    assert [r["val_accuracy"] for r in patient] == val[:stop]


@pytest.mark.cluster
def test_without_a_validation_split_the_last_round_is_selected_and_the_summary_says_so(
    digits_stores, cluster_client, tmp_path
):
    rows, summary, best = _run(
        tmp_path, digits_stores[2], cluster_client, "run", rounds=3, val_fraction=0.0
    )

    assert best["round"] == 3 and summary["best_round"] == 3
    assert summary["selected_on"] == "last round"
    assert summary["test_accuracy_at_best"] == rows[-1]["test_accuracy"]
    assert all(row["val_loss"] is None and row["val_accuracy"] is None for row in rows)


def test_the_train_command_says_which_round_best_pt_holds_and_why():
    validated = {"best_round": 4, "selected_on": "validation", "test_accuracy_at_best": 0.9}
    last = {"best_round": 6, "selected_on": "last round", "test_accuracy_at_best": 0.875}

    assert selection_line(validated) == (
        "best.pt: round 4, the best on the validation split, test accuracy there 0.9000"
    )
    assert selection_line(last) == (
        "best.pt: round 6, the last round (no validation split: --val-fraction is 0), "
        "test accuracy there 0.8750"
    )
