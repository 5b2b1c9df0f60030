"""The validation split (issue 35 item 1): a stratified, seeded slice of each shard's training
rows, held out at train time, removed identically wherever a shard is loaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dask_dane.pipeline.round.holdout import held_out_rows, select_part
from dask_dane.pipeline.round.shards import load_shard
from dask_dane.pipeline.run.checkpoint import load_checkpoint
from dask_dane.pipeline.run.loop import train
from dask_dane.pipeline.run.reference import run_reference
from dask_dane.pipeline.run.rundir import RunDir, check_same_run
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run


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

    train_x, _ = select_part(x, y, "train", 0.3, seed=1, index=0)
    val_x, val_y = select_part(x, y, "val", 0.3, seed=1, index=0)

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
    val = setup.load_val()

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
    args = {**setup.shard_args(1), "start": 0, "stop": 4}  # introspect.read_first_rows does this

    assert len(load_shard(**args).y) == 2


def test_val_fraction_outside_0_1_is_one_line_with_the_fix(run_cli, capfd, assert_one_line_error):
    status = run_cli(["train", "--val-fraction", "1.5", "--rounds", "1"])

    assert_one_line_error(status, capfd, ["--val-fraction", "[0, 1)", "1.5"])


def test_a_resume_may_not_change_the_split():
    saved = RunConfig(store="s.zarr", val_fraction=0.1).as_dict()

    with pytest.raises(ValueError, match=r"val_fraction = 0\.1, not 0\.2"):
        check_same_run(saved, RunConfig(store="s.zarr", val_fraction=0.2))


@pytest.mark.cluster
@pytest.mark.parametrize("broadcast", ["allgather", "tree"])
def test_dask_trains_on_the_same_kept_rows_as_the_reference(
    broadcast, digits_stores, cluster_client, tmp_path
):
    settings = dict(store=str(digits_stores[4]), model="mlp", algorithm="fedavg", seed=3)
    config = RunConfig(
        **settings,
        out=str(tmp_path / "run"),
        rounds=2,
        local_steps=3,
        batch_size=16,
        val_fraction=0.25,
        broadcast=broadcast,
    ).validate()
    all_rows = RunConfig(**settings, rounds=2, local_steps=3, batch_size=16).validate()

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)
    on_all_rows = run_reference(prepare_run(all_rows), rounds=2, num_workers=2)

    weights = load_checkpoint(RunDir(tmp_path / "run").latest)["weights"]
    assert torch.equal(weights, reference.weights)
    assert (weights - on_all_rows.weights).abs().max() > 1e-4  # the held-out rows were left out
