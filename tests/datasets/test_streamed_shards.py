"""Shards streamed from the store (`--shard-memory stream`, issue 36 item 2): every slice equals
the resident shard's, full passes and exact solves give the very weights resident shards
give, minibatches come from a moving window of chunks as a function of the round's seed, the
recipe pickles to another process, auto's size rule, and a streamed Dask run equals the
streamed reference. Stores here have chunks of a few dozen rows, so each shard spans many
chunks and shard bounds fall inside chunks. The option at the CLI:
tests/setup/test_shard_memory.py."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.raw import RawDataset
from dask_dane.datasets.rows.streamed import (
    CACHE_CHUNKS,
    WINDOW_CHUNKS,
    ChunkWindow,
    StreamedRows,
)
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import open_store, write
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round.objective import ShardObjective
from dask_dane.pipeline.engine.round.shards import architecture, load_shard
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.setup.shard_memory import resolve_shard_memory

ROW_BYTES = 64  # a digits image: 1 x 8 x 8 uint8; a ridge row: 8 float64


def _ridge(n: int = 300, d: int = 8) -> RawDataset:
    """A float64 least-squares problem (tabular rows: converted, never normalised)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n + 20, d)) * np.linspace(1.0, 0.2, d)
    y = x @ np.ones(d) + 0.5 * rng.standard_normal(n + 20)
    return RawDataset(
        source="test-ridge", task="regression", num_classes=1, x_train=x[:n], y_train=y[:n],
        x_test=x[n:], y_test=y[n:], attrs={"l2": 0.01},
    )  # fmt: skip


@pytest.fixture(scope="module")
def small_chunks(tmp_path_factory):
    """Stores written with chunks of 37 rows: digits (3 shards) and a ridge problem."""
    root = tmp_path_factory.mktemp("streamed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(write, "CHUNK_BYTES", 37 * ROW_BYTES)
        raw = load_source("digits", SourceOptions(seed=0))
        spec = PartitionSpec(num_shards=3, seed=0)
        digits = write.write_store(raw, spec, root / "digits.zarr", force=False)
        ridge = write.write_store(_ridge(), spec, root / "ridge.zarr", force=False)
    return {"digits": open_store(str(digits.path)), "ridge": open_store(str(ridge.path))}


def _load(info, index: int, dtype: str, memory: str, split: str = "train"):
    start, stop = info.shards[index] if split == "train" else (0, info.num_test)
    return load_shard(
        store=str(info.path), split=split, start=start, stop=stop, index=index,
        task=info.task, normalization=info.normalization, dtype=dtype,
        num_classes=info.num_classes, shard_memory=memory,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_slice_of_a_streamed_shard_equals_the_resident_one(small_chunks, dtype):
    info = small_chunks["digits"]
    resident, streamed = _load(info, 1, dtype, "resident"), _load(info, 1, dtype, "stream")

    assert isinstance(streamed.x, StreamedRows) and streamed.x.num_chunks > 2 * WINDOW_CHUNKS
    assert torch.equal(streamed.y, resident.y)
    assert streamed.x.shape == resident.x.shape and streamed.x.dtype == resident.x.dtype
    picked = torch.tensor([300, 0, 5, 5, -1, 36, 37])
    mask = torch.arange(len(resident.x)) % 3 == 0
    for index in (slice(None), slice(30, 80), slice(100, None, 7), picked, mask, 4, -2):
        assert torch.equal(streamed.x[index], resident.x[index]), index
    # take: a range stays streamed, picked rows are held (in their stored dtype, uint8).
    assert isinstance(streamed.x.take(slice(40, 200)), StreamedRows)
    assert torch.equal(streamed.x.take(slice(40, 200))[10:20], resident.x[50:60])
    held = streamed.x.take(picked)
    assert held.stored.dtype == torch.uint8 and torch.equal(held.dense(), resident.x[picked])
    # Held: the row indices and at most CACHE_CHUNKS decoded chunks, not the shard.
    assert streamed.x.nbytes <= streamed.x.rows.nbytes + CACHE_CHUNKS * 37 * ROW_BYTES
    assert streamed.x.nbytes < resident.x.nbytes


def test_a_streamed_shard_holds_kept_rows_besides_a_range(small_chunks):
    info = small_chunks["digits"]
    whole = _load(info, 0, "float32", "resident")
    start, stop = info.shards[0]
    kept = np.arange(start, stop)[np.arange(stop - start) % 5 != 2]  # a split removed some
    x = StreamedRows(whole_reader(info), kept, dtype=torch.float32, **_norm(whole), device="cpu")

    positions = torch.from_numpy(kept - start)
    assert torch.equal(x[:], whole.x[positions])
    assert torch.equal(x[torch.tensor([3, 0, 77])], whole.x[positions[[3, 0, 77]]])


def test_rows_scattered_over_every_chunk_are_gathered_holding_a_few_chunks_at_a_time(
    small_chunks, monkeypatch
):
    """A fixed sample (diagnostics, --grad-sample) touches every chunk of a shard: the gather
    must not keep each chunk it read alive until the last is copied (the whole shard)."""
    import weakref

    shard = _load(small_chunks["digits"], 0, "float32", "stream")
    alive, most, reads = weakref.WeakSet(), [0], []
    read = StreamedRows._read

    def counted(self, chunk):
        rows = read(self, chunk)
        reads.append(chunk)
        alive.add(rows)
        most[0] = max(most[0], len(alive))
        return rows

    monkeypatch.setattr(StreamedRows, "_read", counted)
    positions = torch.arange(0, len(shard.x), 7)  # rows in every chunk
    picked = shard.x.take(positions)

    assert shard.x.num_chunks >= CACHE_CHUNKS + 6  # so that holding every chunk would fail
    assert most[0] <= CACHE_CHUNKS + 2  # the cache, the chunk being copied, the next one
    assert torch.equal(
        picked[:], _load(small_chunks["digits"], 0, "float32", "resident").x[positions]
    )
    # The same fixed sample next round (the same seed) is not read again: a full pass of I/O.
    count = len(reads)
    assert torch.equal(shard.x.take(positions.clone())[:], picked[:]) and len(reads) == count


def whole_reader(info):
    from dask_dane.datasets.store.stream import ChunkReader

    return ChunkReader(str(info.path), "train", "shard 0")


def _norm(shard) -> dict:
    return {"mean": shard.x.mean, "std": shard.x.std}


def test_a_streamed_shard_pickles_as_its_recipe_and_reads_the_same_rows_elsewhere(
    small_chunks, tmp_path
):
    shard = _load(small_chunks["digits"], 2, "float32", "stream")
    shard.x[:]  # fill the cache: it must not travel
    recipe = pickle.dumps(shard.x)
    (tmp_path / "rows.pkl").write_bytes(recipe)
    script = (
        "import pickle, sys, torch; rows = pickle.load(open(sys.argv[1], 'rb')); "
        "torch.save(rows[torch.tensor([9, 2, 150])], sys.argv[2])"
    )
    out = tmp_path / "rows.pt"
    subprocess.run([sys.executable, "-c", script, tmp_path / "rows.pkl", out], check=True)

    assert len(recipe) < 4096  # path, split, range and normalisation: no rows
    assert torch.equal(torch.load(out), shard.x[torch.tensor([9, 2, 150])])


@pytest.mark.parametrize(
    "algorithm, settings",
    [("gd", dict(local_lr=0.1)), ("dane", dict(local_solver="cg", local_tol=1e-12, mu=0.1))],
)
def test_full_passes_and_exact_solves_give_the_resident_weights_bit_for_bit(
    small_chunks, algorithm, settings
):
    def weights(memory: str) -> torch.Tensor:
        config = RunConfig(
            store=str(small_chunks["ridge"].path), model="linear", dtype="float64",
            algorithm=algorithm, seed=3, rounds=3, shard_memory=memory, **settings,
        ).validate()  # fmt: skip
        return run_reference(prepare_run(config), rounds=3, num_workers=2).weights

    streamed, resident = weights("stream"), weights("resident")
    assert torch.equal(streamed, resident)
    assert not torch.equal(resident, weights_at_start(small_chunks, algorithm, settings))


def weights_at_start(small_chunks, algorithm, settings) -> torch.Tensor:
    from dask_dane.pipeline.setup.run_setup import initial_weights

    config = RunConfig(
        store=str(small_chunks["ridge"].path), model="linear", dtype="float64",
        algorithm=algorithm, seed=3, **settings,
    ).validate()  # fmt: skip
    return initial_weights(prepare_run(config).spec, 3)


def _window_draws(x: StreamedRows, seed: int, steps: int, batch: int):
    window = ChunkWindow(x, torch.Generator().manual_seed(seed))
    rng = torch.Generator().manual_seed(seed + 1)
    draws = []
    for _ in range(steps):
        chunks = window.window()
        draws.append((chunks, window.sample(batch, rng)))
    return draws


def test_minibatches_stay_in_their_window_cover_every_chunk_and_repeat_from_the_seed(
    small_chunks,
):
    x = _load(small_chunks["digits"], 0, "float32", "stream").x
    batch = 16
    epoch = len(x) // batch
    draws = _window_draws(x, seed=5, steps=epoch, batch=batch)

    chunk_of = np.searchsorted(x.bounds, np.arange(len(x)), side="right") - 1
    for chunks, rows in draws:
        assert len(chunks) == WINDOW_CHUNKS and len(set(rows.tolist())) == batch
        assert set(chunk_of[rows.numpy()]) <= set(chunks)
    entered = {c for chunks, _ in draws for c in chunks}
    drawn_from = set(chunk_of[torch.cat([rows for _, rows in draws]).numpy()])
    assert entered == set(range(x.num_chunks)) and len(drawn_from) >= x.num_chunks - 1
    again = _window_draws(x, seed=5, steps=epoch, batch=batch)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(draws, again, strict=True))
    other = _window_draws(x, seed=6, steps=3, batch=batch)
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(draws, other, strict=False))


def test_each_objective_starts_its_own_window_so_a_round_repeats_from_its_seed(small_chunks):
    info = small_chunks["digits"]
    shard = _load(info, 0, "float32", "stream")
    model = architecture(prepare_run(RunConfig(store=str(info.path), model="mlp")).spec)

    def round_draws() -> list[torch.Tensor]:
        objective = ShardObjective(model, shard.x, shard.y, shard.task)
        rng = torch.Generator().manual_seed(11)
        return [objective.sample_rows(32, rng) for _ in range(20)]

    first, retried = round_draws(), round_draws()  # the same round after a lost worker
    assert all(torch.equal(a, b) for a, b in zip(first, retried, strict=True))


def test_a_damaged_chunk_is_one_error_naming_the_shard_when_it_is_read(small_chunks, tmp_path):
    import shutil

    store = tmp_path / "damaged.zarr"
    shutil.copytree(small_chunks["digits"].path, store)
    info = open_store(str(store))
    chunk = next((store / "train" / "x" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.write_bytes(b"not zstd")
    shard = _load(info, 0, "float32", "stream")  # labels are fine: the load succeeds

    with pytest.raises(ValueError, match=r"shard 0 \(rows \[0, \d+\)\) cannot be read.*--force"):
        shard.x[:]


def test_auto_streams_a_shard_above_a_quarter_of_a_worker_and_resident_refuses_a_huge_one(
    small_chunks,
):
    info = small_chunks["digits"]
    largest = max(b - a for a, b in info.shards) * ROW_BYTES

    assert resolve_shard_memory("auto", info, None)[0] == "resident"  # no limit known
    assert resolve_shard_memory("auto", info, 10 * largest)[0] == "resident"
    chosen, why = resolve_shard_memory("auto", info, 2 * largest)
    assert chosen == "stream" and why.startswith("auto: stream (shard ")
    assert resolve_shard_memory("stream", info, 10 * largest)[0] == "stream"
    with pytest.raises(ValueError, match=r"^shard \d holds .* pass --shard-memory stream"):
        resolve_shard_memory("resident", info, largest)


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["dane", "sgd"])
def test_a_streamed_dask_run_equals_the_streamed_reference(
    small_chunks, cluster_client, tmp_path, algorithm
):
    from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
    from dask_dane.pipeline.engine.run.rundir import RunDir
    from dask_dane.pipeline.training import train

    config = RunConfig(
        store=str(small_chunks["digits"].path), out=str(tmp_path / "run"), model="small-cnn",
        algorithm=algorithm, dtype="float64", rounds=2, seed=7, local_steps=30, local_lr=0.05,
        batch_size=16, shard_memory="stream",
    ).validate()  # fmt: skip

    train(config, client=cluster_client)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2)

    run = RunDir(tmp_path / "run")
    assert torch.equal(load_checkpoint(run.latest)["weights"], reference.weights)
    assert "# shard_memory stream (shard " in run.config.read_text()
    resident = run_reference(
        prepare_run(RunConfig(**{**config.as_dict(), "shard_memory": "resident"}).validate()),
        rounds=2,
        num_workers=2,
    )
    assert not torch.equal(resident.weights, reference.weights)  # other minibatches
