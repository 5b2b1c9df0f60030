"""Shards held as stored (issue 36): uint8 images stay uint8 on the worker, and every slice the
objective reads holds exactly the values the whole shard converted at once had, so weights
do not change.

The oracle is the conversion done by hand with numpy on the whole array, as load_shard did
before shards were kept as stored.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dask.sizeof import sizeof

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.raw import SourceOptions
from dask_dane.datasets.rows.features import ALIGNMENT, StoredRows, stored_rows
from dask_dane.datasets.sources import load_source
from dask_dane.datasets.store import open_store, write_store
from dask_dane.models.registry import ModelSpec
from dask_dane.pipeline.engine.round import tasks  # registers the sizes Dask uses
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.engine.round.shards import architecture, load_shard, make_objective
from dask_dane.pipeline.setup.run_setup import initial_state

NORMALIZATION = {"mean": [0.2, 0.5, 0.7], "std": [0.3, 0.25, 0.2]}


def _images(rows: int = 37, size: tuple[int, int] = (6, 5)) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (rows, 3, *size), dtype=np.uint8)


def _by_hand(images: np.ndarray, dtype: np.dtype) -> torch.Tensor:
    mean = np.asarray(NORMALIZATION["mean"], dtype=dtype).reshape(1, -1, 1, 1)
    std = np.asarray(NORMALIZATION["std"], dtype=dtype).reshape(1, -1, 1, 1)
    return torch.from_numpy((images.astype(dtype) - mean) / std)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_slice_of_uint8_rows_equals_the_whole_shard_converted_by_hand(dtype):
    images = _images()
    rows = stored_rows(torch.from_numpy(images.copy()), dtype, NORMALIZATION)
    expected = _by_hand(images, np.dtype(str(dtype).removeprefix("torch.")))

    assert rows.stored.dtype == torch.uint8 and rows.nbytes == images.nbytes
    assert rows.dtype == dtype and rows.element_size() == expected.element_size()
    assert tuple(rows.shape) == images.shape and len(rows) == len(images)
    assert torch.equal(rows.dense(), expected)
    picked = torch.tensor([36, 0, 5, 5, 17])
    for index in (slice(3, 11), slice(30, None), picked, 4):
        assert torch.equal(rows[index], expected[index])
    subset = rows.take(picked)
    assert subset.stored.dtype == torch.uint8 and torch.equal(subset[1:3], expected[picked][1:3])
    both = StoredRows.concat([rows.take(slice(0, 20)), rows.take(slice(20, None))])
    assert torch.equal(both.dense(), expected)


def test_rows_already_as_wide_as_the_run_are_converted_once_and_never_written_through():
    images = _images().astype(np.float32) / 255
    rows = stored_rows(torch.from_numpy(images.copy()), torch.float32, NORMALIZATION)
    mean = np.asarray(NORMALIZATION["mean"], np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(NORMALIZATION["std"], np.float32).reshape(1, -1, 1, 1)

    assert rows.mean is None  # normalised at load, in place, as before
    assert torch.equal(rows.dense(), torch.from_numpy((images - mean) / std))
    # Tabular rows are converted, never normalised; a float32 store in a float64 run stays
    # float32 and is widened per slice.
    table = stored_rows(torch.from_numpy(images.reshape(len(images), -1)), torch.float64, None)
    assert table.stored.dtype == torch.float32 and table[:2].dtype == torch.float64
    batch = table[:4]
    batch += 1.0  # a caller's edit of its batch must not reach the held rows
    assert torch.equal(table[:4], torch.from_numpy(images.reshape(len(images), -1)[:4]).double())


@pytest.mark.parametrize("offset", [8, 24, 40, 56])
def test_rows_held_off_a_64_byte_boundary_are_handed_out_on_one(offset):
    # Rows read into NumPy's memory start where its allocator put them; a view of them handed
    # to MKL would compute other bits than the same rows where torch puts them.
    torch.manual_seed(offset)
    table = torch.randn(40, 512, dtype=torch.float64)
    buffer = torch.empty(table.numel() + 2 * ALIGNMENT // 8, dtype=torch.float64)
    start = ((-buffer.data_ptr()) % ALIGNMENT + offset) // 8
    held = buffer[start : start + table.numel()].view_as(table)
    held.copy_(table)
    rows = stored_rows(held, torch.float64, None)

    for part in (rows[:16], rows[16:40], rows[3]):
        assert part.data_ptr() % ALIGNMENT == 0
    weights = torch.randn(512, dtype=torch.float64)
    assert torch.equal(rows[:16] @ weights, table[:16] @ weights)
    assert torch.equal(rows.dense(), table)


def test_a_digits_shard_is_held_as_uint8_and_sized_so_for_dask(tmp_path):
    store = tmp_path / "digits.zarr"
    write_store(
        load_source("digits", SourceOptions()), PartitionSpec(num_shards=2), store, force=False
    )
    info = open_store(str(store))
    start, stop = info.shards[0]
    shard = load_shard(
        str(store),
        split="train",
        start=start,
        stop=stop,
        index=0,
        task=info.task,
        normalization=info.normalization,
        dtype="float32",
        num_classes=info.num_classes,
    )
    pixels = (stop - start) * int(np.prod(info.sample_shape))

    assert info.x_dtype == "uint8" and shard.x.stored.dtype == torch.uint8
    assert shard.x.nbytes == pixels  # a quarter of the float32 rows held before
    assert pixels <= sizeof(shard) <= pixels + 8 * (stop - start) + 4096


def test_the_objective_on_stored_rows_equals_the_objective_on_converted_rows():
    spec = ModelSpec(name="small-cnn", sample_shape=(3, 8, 8), num_classes=4, dtype="float32")
    images = _images(41, (8, 8))
    labels = torch.from_numpy(np.random.default_rng(1).integers(0, 4, len(images)))
    held = stored_rows(torch.from_numpy(images), torch.float32, NORMALIZATION)
    weights, _ = initial_state(spec, 0)
    lazy = ShardObjective(architecture(spec), held, labels, "classification")
    dense = ShardObjective(architecture(spec), held.dense(), labels, "classification")

    loss, grad = lazy.loss_and_grad(weights)
    dense_loss, dense_grad = dense.loss_and_grad(weights)
    assert loss == dense_loss and torch.equal(grad, dense_grad)
    rows = torch.tensor([3, 9, 40, 0])
    assert torch.equal(lazy.batch_loss(weights, rows), dense.batch_loss(weights, rows))
    assert lazy.evaluate_sums(weights) == dense.evaluate_sums(weights)
    assert lazy.fixed_sample(10, 3).loss(weights) == dense.fixed_sample(10, 3).loss(weights)
    assert make_objective(spec, tasks.ShardData(index=0, x=held, y=labels, task="c")).x is held
