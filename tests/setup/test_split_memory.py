"""Every split held the way it fits (`--shard-memory auto`, the default): the test split and the
validation rows are held by the evaluating worker where they fit, streamed where they do not,
and scored to the same numbers either way; a resumed run keeps the way it was held.

The cluster here has workers with a memory limit of 64 KiB and Dask's memory manager off: auto
decides from that limit, and the test split (96 KiB) alone exceeds it, while nothing is paused
or killed for the real size of a Python process."""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np
import pytest
import torch

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.rows.features import StoredRows
from dask_dane.datasets.rows.streamed import PASS_CACHE_CHUNKS, StreamedRows
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import open_store, write
from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.engine.round import tasks
from dask_dane.pipeline.engine.round.scoring import combine_scores, score_piece
from dask_dane.pipeline.engine.run.metrics import read_metrics
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup import shard_memory
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_file import saved_config, write_run_config
from dask_dane.pipeline.setup.run_setup import initial_state, prepare_run
from dask_dane.pipeline.setup.shard_memory import resolve_split_memory

ROW_BYTES = 64  # a digits image: 1 x 8 x 8 uint8
LIMIT = 64 * 2**10  # each worker's memory limit, as auto reads it


@pytest.fixture(scope="module")
def big_test_split(tmp_path_factory):
    """Digits with 300 training rows in 2 shards and 1497 test rows (96 KiB, more than LIMIT),
    in chunks of 37 rows."""
    raw = load_source("digits", SourceOptions(seed=0))
    x = np.concatenate([raw.x_train, raw.x_test])
    y = np.concatenate([raw.y_train, raw.y_test])
    raw = dataclasses.replace(raw, x_train=x[:300], y_train=y[:300], x_test=x[300:], y_test=y[300:])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(write, "CHUNK_BYTES", 37 * ROW_BYTES)
        path = tmp_path_factory.mktemp("split") / "digits.zarr"
        written = write.write_store(raw, PartitionSpec(num_shards=2, seed=0), path, force=False)
    return open_store(str(written.path))


def test_auto_holds_what_fits_beside_the_shards_and_streams_the_rest(big_test_split, monkeypatch):
    info = big_test_split
    decide = dict(train="resident", shards_on_worker=1)
    monkeypatch.setattr(shard_memory, "WORKER_BASE_BYTES", 0)  # a worker of a few KiB

    # A worker holding 1 of the 2 shards scores half the test split and half the held-out rows.
    held, why = resolve_split_memory("auto", info, LIMIT, val_fraction=0.1, **decide)
    assert held == {"test": "stream", "val": "resident"}, why
    assert "a worker's part: test stream (47 KiB), val resident (1 KiB)" in why

    held, _ = resolve_split_memory("auto", info, LIMIT, val_fraction=0.9, **decide)
    assert held == {"test": "stream", "val": "stream"}  # 135 rows: over what the shard leaves
    held, _ = resolve_split_memory("auto", info, 100 * LIMIT, val_fraction=0.9, **decide)
    assert held == {"test": "resident", "val": "resident"}
    held, _ = resolve_split_memory("stream", info, 100 * LIMIT, val_fraction=0.1, **decide)
    assert held == {"test": "stream", "val": "stream"}
    with pytest.raises(
        ValueError, match=r"^a worker's part of the test split holds 47 KiB .* --shard-memory auto"
    ):
        resolve_split_memory("resident", info, 48 * 2**10, val_fraction=0.1, **decide)


def test_auto_leaves_the_worker_its_own_base_below_the_pause_threshold(big_test_split):
    # 1.7 M training rows of 64 bytes in 2 shards (52 MiB each, streamed on 512 MiB workers);
    # 30 % held out is 31 MiB of validation rows, 15.6 MiB of them on each worker.
    info = dataclasses.replace(
        big_test_split, shards=((0, 850_000), (850_000, 1_700_000)), num_test=1000
    )
    decide = dict(train="stream", shards_on_worker=1, val_fraction=0.3)

    small, _ = resolve_split_memory("auto", info, 512 * 2**20, **decide)
    large, _ = resolve_split_memory("auto", info, 1024 * 2**20, **decide)

    # 80% of 512 MiB less the worker's 400 MiB leaves 9.6 MiB, under a quarter's 128 MiB.
    assert small == {"test": "resident", "val": "stream"}
    assert large == {"test": "resident", "val": "resident"}


def test_streamed_splits_score_as_resident_ones_and_hold_no_chunk_afterwards(big_test_split):
    config = RunConfig(store=str(big_test_split.path), model="mlp", val_fraction=0.5).validate()
    setup = prepare_run(config)
    weights, buffers = initial_state(setup.spec, 3)

    resident = dataclasses.replace(setup, test_memory="resident", val_memory="resident")
    streamed = dataclasses.replace(setup, test_memory="stream", val_memory="stream")
    held, split = resident.load_evaluation(), streamed.load_evaluation()
    scores = [tasks.evaluate(setup.spec, s, weights, buffers) for s in (held, split)]

    assert isinstance(held.x, StoredRows) and isinstance(held.held_out.x, StoredRows)
    assert isinstance(split.x, StreamedRows) and isinstance(split.held_out.x, StreamedRows)
    assert split.x.cache_chunks == PASS_CACHE_CHUNKS
    assert torch.equal(held.held_out.y, split.held_out.y)
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert scores[0][name] == scores[1][name], name
    assert split.x.nbytes == split.x.rows.nbytes  # no chunk kept between evaluations
    assert split.held_out.x.nbytes == split.held_out.x.rows.nbytes


@pytest.fixture(scope="module")
def small_workers():
    """2 workers whose memory limit is LIMIT, with Dask's memory manager off."""
    import dask
    from distributed import Client, LocalCluster

    from dask_dane.pipeline.launchers.cluster import CLUSTER_CONFIG

    off = {f"distributed.worker.memory.{k}": False for k in ("target", "spill", "pause")}
    off["distributed.worker.memory.terminate"] = False
    with dask.config.set({**CLUSTER_CONFIG, **off}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR, memory_limit=LIMIT,
        )  # fmt: skip
        client = Client(cluster)
        yield client
        client.close()
        cluster.close()


@pytest.mark.cluster
@pytest.mark.parametrize("val_fraction", [0.0, 0.5], ids=["no-validation", "validation"])
def test_a_test_split_larger_than_a_worker_trains_and_scores_with_the_defaults(
    big_test_split, small_workers, tmp_path, val_fraction
):
    from dask_dane.pipeline.training import train

    config = RunConfig(
        store=str(big_test_split.path), out=str(tmp_path / "run"), model="small-cnn",
        rounds=2, seed=3, local_steps=5, batch_size=16, val_fraction=val_fraction,
    ).validate()  # fmt: skip

    train(config, client=small_workers)

    run = RunDir(tmp_path / "run")
    note = re.search(r"^# shard_memory (.*)$", run.config.read_text(), flags=re.M).group(1)
    assert note.startswith("auto: resident (shard ") and "a worker's part: test stream" in note
    assert ("val stream" in note) == (val_fraction > 0), note
    rows = read_metrics(run.metrics)
    reference = run_reference(prepare_run(config), rounds=2, num_workers=2).history
    scored = ["test_loss", "test_accuracy"] + ["val_loss", "val_accuracy"] * (val_fraction > 0)
    for row, expected in zip(rows, reference, strict=True):
        assert {k: row[k] for k in scored} == {k: expected[k] for k in scored}


def test_a_resumed_run_keeps_how_its_shards_were_held(tmp_path, digits_stores):
    run = RunDir(tmp_path / "run")
    run.check_writable()
    store = str(digits_stores[2])

    write_run_config(run, RunConfig(store=store, shard_memory="stream").validate())
    assert saved_config(run)["shard_memory"] == "stream"

    lines = run.config.read_text().splitlines()
    run.config.write_text("\n".join(x for x in lines if not x.startswith("shard_memory")) + "\n")
    assert saved_config(run)["shard_memory"] == "resident"  # written when resident was default
    assert RunConfig().shard_memory == "auto"


def test_pieces_scored_apart_add_up_to_the_whole_splits_score(big_test_split):
    config = RunConfig(store=str(big_test_split.path), model="mlp", val_fraction=0.2).validate()
    setup = prepare_run(config)
    weights, buffers = initial_state(setup.spec, 5)

    pieces = setup.load_pieces()
    scored = [(i, score_piece(setup.spec, p, weights)) for i, p in enumerate(pieces)]
    combined = combine_scores(scored)
    whole = tasks.evaluate(setup.spec, setup.load_evaluation(), weights, buffers)

    assert [len(p.y) for p in pieces] == [748, 749]  # the test split's 1497 rows, halved
    assert [len(p.held_out.y) for p in pieces] == [30, 30]  # each shard's held-out rows
    assert combined["accuracy"] == whole["accuracy"]
    assert combined["val_accuracy"] == whole["val_accuracy"]
    # Each chunk's loss is a float32 sum, and a piece's chunks start at other rows.
    assert combined["loss"] == pytest.approx(whole["loss"], rel=1e-6)
    assert combined["val_loss"] == pytest.approx(whole["val_loss"], rel=1e-6)
    # Scored on two workers, whichever finishes first: the same sums in the same order.
    apart = combine_scores(scored[1:], scored[:1])
    assert apart == {**combined, "eval_s": apart["eval_s"]}
