"""Partitioners: shard counts and sizes, every row once, label skew, seeds, bad parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dask_dane.datasets.partition import PartitionSpec, partition_rows

NUM_CLASSES = 10


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """1000 labels of 10 unevenly sized classes (as a real train split is)."""
    return np.random.default_rng(123).integers(0, NUM_CLASSES, size=1000).astype(np.int64)


def _distinct_labels(labels: np.ndarray, shards: list[np.ndarray]) -> list[int]:
    return [len(np.unique(labels[rows])) for rows in shards]


def _largest_class_share(labels: np.ndarray, shards: list[np.ndarray]) -> float:
    """Mean over shards of the share of the shard's most common label."""
    shares = [np.bincount(labels[rows], minlength=NUM_CLASSES).max() / len(rows) for rows in shards]
    return float(np.mean(shares))


@pytest.mark.parametrize(
    "spec",
    [
        PartitionSpec(kind="iid", num_shards=7, seed=1),
        PartitionSpec(kind="label-skew", num_shards=5, classes_per_shard=2, seed=1),
        PartitionSpec(kind="dirichlet", num_shards=4, alpha=0.5, seed=1),
    ],
    ids=lambda spec: spec.kind,
)
def test_every_row_lands_in_exactly_one_shard(spec, labels):
    shards = partition_rows(spec, labels, NUM_CLASSES)

    assert len(shards) == spec.num_shards
    assert all(len(rows) > 0 for rows in shards)
    assert all(np.all(np.diff(rows) > 0) for rows in shards)  # sorted, no repeats in a shard
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)), np.arange(len(labels)))


def test_iid_shards_differ_in_size_by_at_most_one_and_mix_all_labels(labels):
    spec = PartitionSpec(kind="iid", num_shards=7, seed=0)

    shards = partition_rows(spec, labels, NUM_CLASSES)

    sizes = [len(rows) for rows in shards]
    assert sum(sizes) == 1000
    assert max(sizes) - min(sizes) <= 1
    assert _distinct_labels(labels, shards) == [NUM_CLASSES] * 7
    # A shuffle, not consecutive blocks of rows: shard 0 reaches into the last rows.
    assert shards[0].max() > 900


@pytest.mark.parametrize(("num_shards", "classes_per_shard"), [(10, 1), (5, 2), (4, 3), (3, 7)])
def test_label_skew_shards_see_at_most_k_labels(labels, num_shards, classes_per_shard):
    spec = PartitionSpec(
        kind="label-skew", num_shards=num_shards, classes_per_shard=classes_per_shard, seed=0
    )

    shards = partition_rows(spec, labels, NUM_CLASSES)

    assert max(_distinct_labels(labels, shards)) <= classes_per_shard
    # Pieces are cut so that shards stay near equal in size (classes here hold 80..120 rows).
    sizes = [len(rows) for rows in shards]
    assert max(sizes) / min(sizes) < 1.5


def test_label_skew_with_fewer_slots_than_labels_names_the_flags(labels):
    # 2 shards x 2 classes cannot hold 10 labels without breaking "2 classes per shard".
    spec = PartitionSpec(kind="label-skew", num_shards=2, classes_per_shard=2, seed=0)

    with pytest.raises(ValueError, match=r"--classes-per-shard or --shards"):
        partition_rows(spec, labels, NUM_CLASSES)


def test_label_skew_with_balanced_labels_gives_exactly_k_labels_per_shard():
    # 10 classes of 100 rows, 5 shards x 2 pieces of 100: every piece is one whole class.
    balanced = np.repeat(np.arange(NUM_CLASSES), 100)
    spec = PartitionSpec(kind="label-skew", num_shards=5, classes_per_shard=2, seed=4)

    shards = partition_rows(spec, balanced, NUM_CLASSES)

    assert _distinct_labels(balanced, shards) == [2] * 5
    assert [len(rows) for rows in shards] == [200] * 5


def test_dirichlet_small_alpha_is_skewed_and_large_alpha_is_near_iid(labels):
    skewed = partition_rows(
        PartitionSpec(kind="dirichlet", num_shards=4, alpha=0.05, seed=2), labels, NUM_CLASSES
    )
    mixed = partition_rows(
        PartitionSpec(kind="dirichlet", num_shards=4, alpha=1000.0, seed=2), labels, NUM_CLASSES
    )

    # Near-iid shards hold ~10% of each label; skewed shards are dominated by few labels.
    assert _largest_class_share(labels, mixed) < 0.2
    assert _largest_class_share(labels, skewed) > 0.35
    assert np.mean(_distinct_labels(labels, skewed)) < np.mean(_distinct_labels(labels, mixed))
    assert _distinct_labels(labels, mixed) == [NUM_CLASSES] * 4


@pytest.mark.parametrize(
    "spec",
    [
        PartitionSpec(kind="iid", num_shards=3, seed=5),
        PartitionSpec(kind="label-skew", num_shards=3, classes_per_shard=4, seed=5),
        PartitionSpec(kind="dirichlet", num_shards=3, seed=5),
    ],
    ids=lambda spec: spec.kind,
)
def test_same_seed_same_split_other_seed_other_split(spec, labels):
    first = partition_rows(spec, labels, NUM_CLASSES)
    again = partition_rows(spec, labels, NUM_CLASSES)
    other = partition_rows(dataclasses.replace(spec, seed=6), labels, NUM_CLASSES)

    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(
        len(a) == len(b) and np.array_equal(a, b) for a, b in zip(first, other, strict=True)
    )


@pytest.mark.parametrize(
    ("spec", "flag"),
    [
        (PartitionSpec(kind="random"), "partition"),
        (PartitionSpec(num_shards=0), "--shards"),
        (PartitionSpec(num_shards=-2), "--shards"),
        (PartitionSpec(num_shards=1001), "shards"),  # more shards than the 1000 rows
        (PartitionSpec(kind="label-skew", classes_per_shard=0), "--classes-per-shard"),
        (PartitionSpec(kind="label-skew", classes_per_shard=11), "--classes-per-shard"),
        (PartitionSpec(kind="dirichlet", alpha=0.0), "--alpha"),
        (PartitionSpec(kind="dirichlet", alpha=-1.0), "--alpha"),
        (PartitionSpec(kind="dirichlet", alpha=float("nan")), "--alpha"),
    ],
)
def test_bad_parameters_raise_value_error_naming_the_flag(spec, flag, labels):
    with pytest.raises(ValueError, match=flag):
        partition_rows(spec, labels, NUM_CLASSES)


def test_dirichlet_that_leaves_a_shard_empty_says_how_to_fix_it():
    # Two classes, 20 shards, a tiny alpha: each class goes (almost) whole to one shard.
    two_classes = np.repeat([0, 1], 50)
    spec = PartitionSpec(kind="dirichlet", num_shards=20, alpha=0.001, seed=0)

    with pytest.raises(ValueError, match=r"empty.*--alpha"):
        partition_rows(spec, two_classes, 2)
