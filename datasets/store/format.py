"""What both sides of the store agree on: its version, its arrays, and StoreInfo, what a
store holds as read from its attributes and array metadata (docs/reference/formats.md)."""

from __future__ import annotations

from dataclasses import dataclass

FORMAT_VERSION = 1
ARRAYS = ("train/x", "train/y", "test/x", "test/y")

# What a worker that cannot see a store is told (pipeline/engine/round/tasks.py load_shard).
SHARED_STORE = (
    "a store must be on a file system every worker shares, at the same path, or at a URL "
    "(s3://...) they all reach"
)


@dataclass(frozen=True, kw_only=True)
class StoreInfo:
    """What a store holds, read from its attributes and array metadata."""

    path: str
    source: str
    task: str
    num_classes: int
    sample_shape: tuple[int, ...]
    x_dtype: str
    y_dtype: str
    num_train: int
    num_test: int
    shards: tuple[tuple[int, int], ...]
    partition: dict
    normalization: dict
    l2: float = 0.0  # L2 penalty lambda the source recorded (synthetic-ridge); 0 if none
    # The label names the source recorded (image folders, CIFAR); None: the labels are the names.
    class_names: tuple[str, ...] | None = None

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def is_image(self) -> bool:
        return len(self.sample_shape) == 3


def brief(err: BaseException) -> str:
    """An exception's message cut to one line (the CLI prints errors as one line)."""
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__
