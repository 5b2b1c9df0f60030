"""Partitioners: split the training rows into shards.

Each returns a list of row-index arrays, one per shard. The store writes the rows shard after
shard, so every shard becomes one contiguous [start, stop) slice of the stored train split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PARTITIONS = ("iid", "label-skew", "dirichlet")


@dataclass(frozen=True, kw_only=True)
class PartitionSpec:
    """How to split: the kind and its parameters (recorded in the store's attributes)."""

    kind: str = "iid"
    num_shards: int = 2
    seed: int = 0
    classes_per_shard: int = 2
    alpha: float = 0.5

    def as_attrs(self) -> dict[str, object]:
        attrs: dict[str, object] = {"kind": self.kind, "seed": self.seed}
        if self.kind == "label-skew":
            attrs["classes_per_shard"] = self.classes_per_shard
        if self.kind == "dirichlet":
            attrs["alpha"] = self.alpha
        return attrs


def validate_partition(spec: PartitionSpec, *, num_samples: int, num_classes: int) -> None:
    """Raise ValueError naming the problem and the fix before any work is done."""
    if spec.kind not in PARTITIONS:
        raise ValueError(f"unknown partition {spec.kind!r}; choose one of: {', '.join(PARTITIONS)}")
    if spec.num_shards < 1:
        raise ValueError(f"--shards must be at least 1 (got {spec.num_shards})")
    if num_samples < spec.num_shards:
        raise ValueError(
            f"{num_samples} training samples cannot fill {spec.num_shards} shards; "
            "use fewer shards or more samples"
        )
    if spec.kind == "label-skew" and not 1 <= spec.classes_per_shard <= num_classes:
        raise ValueError(
            f"--classes-per-shard must be between 1 and {num_classes} "
            f"(got {spec.classes_per_shard})"
        )
    if spec.kind == "dirichlet" and not spec.alpha > 0:
        raise ValueError(f"--alpha must be positive (got {spec.alpha})")


def partition_rows(spec: PartitionSpec, labels: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """Split row indices 0..len(labels)-1 into `spec.num_shards` shards."""
    validate_partition(spec, num_samples=len(labels), num_classes=num_classes)
    rng = np.random.default_rng(spec.seed)
    if spec.kind == "iid":
        shards = np.array_split(rng.permutation(len(labels)), spec.num_shards)
    elif spec.kind == "label-skew":
        shards = _label_skew(labels, spec, rng)
    else:
        shards = _dirichlet(labels, num_classes, spec, rng)
    empty = [i for i, rows in enumerate(shards) if len(rows) == 0]
    if empty:
        raise ValueError(
            f"partition left shard(s) {empty} empty; use fewer shards, a larger --alpha "
            "or more samples"
        )
    return [np.sort(rows) for rows in shards]


def _label_skew(labels: np.ndarray, spec: PartitionSpec, rng: np.random.Generator) -> list:
    """Cut each label's rows into pieces, shards*K in all, and deal each shard K pieces.

    As McMahan et al. (2017), except that a piece never holds two labels (cutting the sorted
    rows into equal pieces lets pieces straddle label boundaries, so a shard could see up to
    2K labels). Each label gets at least one piece and the rest go where pieces are largest,
    so pieces, and shards, are near equal in size; a shard sees at most K labels.
    """
    present, counts = np.unique(labels, return_counts=True)
    num_pieces = spec.num_shards * spec.classes_per_shard
    if num_pieces < len(present):
        raise ValueError(
            f"label-skew: {spec.num_shards} shards of {spec.classes_per_shard} classes cannot "
            f"hold all {len(present)} labels; raise --classes-per-shard or --shards"
        )
    pieces_per_label = np.ones(len(present), dtype=np.int64)
    for _ in range(num_pieces - len(present)):
        pieces_per_label[np.argmax(counts / pieces_per_label)] += 1
    pieces = [
        piece
        for label, num in zip(present, pieces_per_label, strict=True)
        for piece in np.array_split(rng.permutation(np.flatnonzero(labels == label)), num)
    ]
    piece_order = rng.permutation(len(pieces))
    return [
        np.concatenate([pieces[p] for p in piece_order[s :: spec.num_shards]])
        for s in range(spec.num_shards)
    ]


def _dirichlet(
    labels: np.ndarray, num_classes: int, spec: PartitionSpec, rng: np.random.Generator
) -> list:
    """Per class, draw shard proportions from Dirichlet(alpha) (Hsu et al. 2019)."""
    shards: list[list[np.ndarray]] = [[] for _ in range(spec.num_shards)]
    for label in range(num_classes):
        rows = rng.permutation(np.flatnonzero(labels == label))
        proportions = rng.dirichlet(np.full(spec.num_shards, spec.alpha))
        cuts = (np.cumsum(proportions)[:-1] * len(rows)).astype(int)
        for shard, part in enumerate(np.split(rows, cuts)):
            shards[shard].append(part)
    return [np.concatenate(parts) if parts else np.array([], int) for parts in shards]
