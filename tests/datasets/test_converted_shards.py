"""`--shard-memory converted`: shards held in the run's dtype, converted and normalised once at
load (how workers held them before issue 36; `dane bench memory` compares it with resident
and streamed shards). The oracle for the rows is the conversion done by hand with numpy; for
the weights, the resident run, since the conversion is elementwise either way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import open_store, write_store
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.shards import load_shard
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.shard_memory import resolve_shard_memory


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    path = tmp_path_factory.mktemp("converted") / "digits.zarr"
    raw = load_source("digits", SourceOptions(seed=0))
    write_store(raw, PartitionSpec(num_shards=2, seed=0), path, force=False)
    return open_store(str(path))


def _load(info, memory: str, dtype: str = "float32"):
    start, stop = info.shards[0]
    return load_shard(
        store=str(info.path), split="train", start=start, stop=stop, index=0,
        task=info.task, normalization=info.normalization, dtype=dtype,
        num_classes=info.num_classes, shard_memory=memory,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_converted_shard_holds_the_rows_converted_by_hand_at_the_runs_width(digits, dtype):
    shard = _load(digits, "converted", dtype)
    start, stop = digits.shards[0]
    images = zarr.open_group(str(digits.path), mode="r")["train/x"][start:stop]
    shape = (1, -1, 1, 1)
    mean = np.asarray(digits.normalization["mean"], dtype=dtype).reshape(shape)
    std = np.asarray(digits.normalization["std"], dtype=dtype).reshape(shape)
    by_hand = torch.from_numpy((images.astype(dtype) - mean) / std)

    assert shard.x.stored.dtype == getattr(torch, dtype)
    assert torch.equal(shard.x.stored, by_hand)  # held converted, nothing left to do per slice
    assert shard.x.mean is None
    assert torch.equal(shard.x[:], _load(digits, "resident", dtype).x[:])
    assert shard.x.nbytes == images.size * np.dtype(dtype).itemsize  # 4x (8x) the uint8


def test_converted_and_resident_shards_give_the_same_weights_bit_for_bit(digits):
    def weights(memory: str) -> torch.Tensor:
        config = RunConfig(
            store=str(digits.path), model="small-cnn", algorithm="dane", local_steps=4,
            batch_size=16, rounds=2, seed=1, shard_memory=memory,
        ).validate()  # fmt: skip
        return run_reference(prepare_run(config), rounds=2, num_workers=2).weights

    assert torch.equal(weights("converted"), weights("resident"))


def test_converted_is_sized_at_the_runs_dtype_when_checked_against_a_worker(digits):
    stored = max(b - a for a, b in digits.shards) * 64  # 1 x 8 x 8 uint8 a row
    limit = 2 * stored  # resident fits (half the limit); converted (4x) does not

    assert resolve_shard_memory("resident", digits, limit)[0] == "resident"
    assert resolve_shard_memory("converted", digits, 10 * limit)[0] == "converted"
    assert resolve_shard_memory("converted", digits, None)[0] == "converted"
    with pytest.raises(ValueError, match=r"^shard \d holds .*: it cannot be held converted"):
        resolve_shard_memory("converted", digits, limit)
