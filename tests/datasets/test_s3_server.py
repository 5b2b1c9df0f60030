"""Stores at s3:// URLs, against a real S3-compatible server on 127.0.0.1 (moto's server
mode, started and stopped here) with its access checks on: prepare to S3, info and train
from it with 2 worker processes, a missing bucket or wrong credentials as exit 2 and one
line (the CLI as a user runs it, credentials and endpoint in the environment); in this
process, a store written, read and removed at a URL, a write that fails midway, and a shard
streamed chunk by chunk. URLs that cannot work, with no server:
tests/datasets/test_s3_no_server.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import s3_cli  # shared with test_s3_no_server.py

moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
pytest.importorskip("s3fs", reason="s3fs is the s3 extra")

pytestmark = pytest.mark.cluster  # a server thread and CLI subprocesses
HERE = Path(__file__).resolve().parents[1]  # tests/


BUCKET, STORE, dane, _one_line = s3_cli.BUCKET, s3_cli.STORE, s3_cli.dane, s3_cli.one_line


@pytest.fixture(scope="module")
def s3_env():
    """The environment of a user with a key to BUCKET on the server at AWS_ENDPOINT_URL."""
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    setup = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    setup |= {"aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
    try:
        boto3.client("s3", **setup).create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="dane")
        allow = {"Effect": "Allow", "Action": "*", "Resource": "*"}
        policy = json.dumps({"Version": "2012-10-17", "Statement": [allow]})
        iam.put_user_policy(UserName="dane", PolicyName="all", PolicyDocument=policy)
        key = iam.create_access_key(UserName="dane")["AccessKey"]
        # From here on the server checks every request's signature against its users' keys.
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        server.stop()


def _side_by_side(
    commands: list[tuple[str, ...]], cwd: Path, env: dict[str, str]
) -> list[subprocess.CompletedProcess]:
    """`dane` with each argument list, all at once; their results in the same order."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda args: dane(*args, cwd=cwd, env=env), commands))


def _arrays(store: str, env: dict[str, str]) -> list[np.ndarray]:
    """The four arrays of a store, read in a process with `env` (the server's user)."""
    code = (
        "import sys, numpy as np, zarr\n"
        "g = zarr.open_group(sys.argv[1], mode='r', zarr_format=3)\n"
        "np.savez(sys.argv[2], *[g[k][:] for k in ('train/x','train/y','test/x','test/y')])\n"
    )
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"arrays-{os.getpid()}.npz"
    subprocess.run(
        [sys.executable, "-c", code, store, str(out)],
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    with np.load(out) as saved:
        arrays = [saved[f"arr_{i}"] for i in range(4)]
    out.unlink()
    return arrays


def test_prepare_to_s3_then_info_and_train_from_it_as_from_a_folder(s3_env, tmp_path):
    prepare = ("prepare", "digits", "--shards", "2", "--seed", "4")
    # Commands that do not depend on each other run side by side (CI's time: docs/testing.md).
    to_s3, to_folder = _side_by_side(
        [(*prepare, "--out", STORE), (*prepare, "--out", "local.zarr")], tmp_path, s3_env
    )
    again, shown = _side_by_side([(*prepare, "--out", STORE), ("info", STORE)], tmp_path, s3_env)

    assert to_s3.returncode == 0 and to_folder.returncode == 0, to_s3.stderr + to_folder.stderr
    assert not (tmp_path / "s3:").exists()  # the URL did not become a local folder
    assert "already exists" in _one_line(again)
    assert shown.returncode == 0 and f"store:          {STORE}" in shown.stdout
    for remote, local in zip(
        _arrays(STORE, s3_env), _arrays(str(tmp_path / "local.zarr"), s3_env), strict=True
    ):
        assert np.array_equal(remote, local)

    # The same run from the URL and from the folder: the same data, so the same numbers.
    train = ("--workers", "2", "--rounds", "2", "--model", "mlp", "--seed", "1")
    # Two clusters at once: the second's dashboard on a free port.
    free_port = ("--dashboard-address", "127.0.0.1:0")
    from_s3, from_folder = _side_by_side(
        [("train", STORE, *train, "--out", "run-s3"),
         ("train", "local.zarr", *train, "--out", "run-local", *free_port)],
        tmp_path, s3_env,
    )  # fmt: skip
    assert from_s3.returncode == 0, from_s3.stderr
    assert from_folder.returncode == 0, from_folder.stderr
    losses = [
        [json.loads(line)["train_loss"] for line in (tmp_path / run / "metrics.jsonl").open()]
        for run in ("run-s3", "run-local")
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 2
    # The benches take the URL as --store too.
    toml = tmp_path / "runs.toml"
    toml.write_text('[defaults]\nmodel = "mlp"\nrounds = 1\n[[run]]\nname = "fedavg"\n'
                    'algorithm = "fedavg"\n')  # fmt: skip
    bench = dane("bench", "train", "--config", str(toml), "--store", STORE, "--json",
                 str(tmp_path / "bench.json"), "--workdir", "bench", cwd=tmp_path,
                 env=s3_env)  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    (run,) = json.loads((tmp_path / "bench.json").read_text())["runs"]
    assert run["error"] is None and run["config"]["store"] == STORE


def test_a_missing_bucket_is_one_line_and_writes_nothing(s3_env, tmp_path):
    url = "s3://no-such-bucket/x.zarr"
    written = dane("prepare", "digits", "--out", url, cwd=tmp_path, env=s3_env)
    read = dane("info", url, cwd=tmp_path, env=s3_env)

    for done in (written, read):
        assert "bucket 'no-such-bucket' does not exist" in _one_line(done)
    assert not (tmp_path / "s3:").exists()


def test_wrong_credentials_are_one_line_that_does_not_print_them(s3_env, tmp_path):
    wrong = {**s3_env, "AWS_SECRET_ACCESS_KEY": "not-the-secret-0123456789"}
    read = dane("info", STORE, cwd=tmp_path, env=wrong)
    trained = dane("train", STORE, "--rounds", "1", cwd=tmp_path, env=wrong)

    for done in (read, trained):
        message = _one_line(done)
        assert "access denied" in message and "AWS_SECRET_ACCESS_KEY" in message
        assert wrong["AWS_SECRET_ACCESS_KEY"] not in message
        assert s3_env["AWS_ACCESS_KEY_ID"] not in message


def _keys(location, url: str) -> set[str]:
    """Every object under the store's prefix, relative to it."""
    prefix = url.removeprefix("s3://").rstrip("/") + "/"
    return {key.removeprefix(prefix) for key in location.filesystem(url).find(url)}


def test_write_open_read_and_remove_a_store_at_a_url_in_this_process(s3_env, monkeypatch, tmp_path):
    # The same functions the CLI runs, in the test process (coverage sees the remote paths).
    from dask_dane.datasets import location
    from dask_dane.datasets.partition import PartitionSpec
    from dask_dane.datasets.sources import SourceOptions, load_source
    from dask_dane.datasets.store import open_store, read_shard, write_store

    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    url = f"s3://{BUCKET}/in-process.zarr"
    fresh = f"s3://{BUCKET}/in-process-fresh.zarr"
    raw = load_source("digits", SourceOptions(seed=2))  # images: x is (N, 1, 8, 8)
    # The replacement holds other data: tabular rows, so its chunks have other keys.
    other = load_source("digits-tabular", SourceOptions(seed=2))
    spec = PartitionSpec(num_shards=2, seed=2)

    info = write_store(raw, PartitionSpec(num_shards=3, seed=2), url, force=False)
    with pytest.raises(ValueError, match="already exists"):
        write_store(raw, PartitionSpec(num_shards=3, seed=2), url, force=False)
    old_keys = _keys(location, url)
    location.filesystem(url).pipe(f"{url}/left-by-hand.bin", b"not part of any store")
    replaced = write_store(other, spec, url, force=True)
    write_store(other, spec, fresh, force=False)  # the same store where nothing was before
    local = write_store(other, spec, tmp_path / "local.zarr", force=False)

    assert info.path == url and location.is_remote(url) and location.resolve(url) == url
    assert open_store(url).num_shards == replaced.num_shards == 2
    start, stop = replaced.shards[1]
    x, y = read_shard(url, "train", start, stop, index=1, task="classification", num_classes=10)
    assert len(x) == len(y) == stop - start
    # --force cleared the old prefix: exactly the new store's objects are left there, none of
    # the old store's (its image chunks) nor one put there by hand.
    new_keys, fresh_keys = _keys(location, url), _keys(location, fresh)
    only_old = old_keys - fresh_keys
    assert only_old  # the premise: the old store had objects that the new one has not
    assert not only_old & new_keys and "left-by-hand.bin" not in new_keys
    assert new_keys == fresh_keys
    # Each shard and the test split read from S3 equal the local store's, array for array.
    assert replaced.shards == local.shards
    reads = [("train", a, b, i) for i, (a, b) in enumerate(local.shards)]
    for split, a, b, i in [*reads, ("test", 0, local.num_test, -1)]:
        remote = read_shard(url, split, a, b, index=i, task="classification", num_classes=10)
        here = read_shard(local.path, split, a, b, index=i, task="classification",
                          num_classes=10)  # fmt: skip
        for r, h in zip(remote, here, strict=True):
            assert r.dtype == h.dtype and r.shape == h.shape and np.array_equal(r, h)
    location.remove(fresh)
    location.remove(url)
    assert not location.exists(url)
    with pytest.raises(ValueError, match="does not exist"):
        open_store(url)
    with pytest.raises(ValueError, match="the bucket 'no-such-bucket' does not exist"):
        location.exists("s3://no-such-bucket/x.zarr")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(ValueError, match="access denied"):
        location.exists(url)


def test_a_remote_write_that_fails_midway_removes_what_it_wrote(s3_env, monkeypatch):
    from dask_dane.datasets import location
    from dask_dane.datasets.partition import PartitionSpec
    from dask_dane.datasets.sources import SourceOptions, load_source
    from dask_dane.datasets.store import write as store_module

    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    url = f"s3://{BUCKET}/fails-midway.zarr"
    written = []
    real_write = store_module._write_array

    def fail_on_third_array(group, name, data, order=None):
        if len(written) == 2:
            raise OSError("connection reset by peer")
        real_write(group, name, data, order)
        written.append(name)

    monkeypatch.setattr(store_module, "_write_array", fail_on_third_array)
    raw = load_source("digits", SourceOptions(seed=2))

    with pytest.raises(ValueError, match=r"fails-midway\.zarr"):
        store_module.write_store(raw, PartitionSpec(num_shards=2, seed=2), url, force=False)

    assert written == ["train/x", "train/y"]  # two arrays had reached the bucket
    assert not location.exists(url)
    assert not location.filesystem(url).find(url)  # not one object left under the prefix


def test_a_shard_streams_from_s3_chunk_by_chunk_as_read_whole(s3_env, monkeypatch):
    # --shard-memory stream on S3: the features are read a chunk at a time through fsspec,
    # with the prefetch thread, and equal the shard read whole; the recipe pickles.
    import pickle

    import torch

    from dask_dane.datasets import location
    from dask_dane.datasets.partition import PartitionSpec
    from dask_dane.datasets.sources import SourceOptions, load_source
    from dask_dane.datasets.store import write
    from dask_dane.pipeline.engine.round.shards import load_shard

    for name, value in s3_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(write, "CHUNK_BYTES", 64 * 50)  # 8x8 uint8 images: 50 rows a chunk
    url = f"s3://{BUCKET}/streamed.zarr"
    raw = load_source("digits", SourceOptions(seed=3))
    info = write.write_store(raw, PartitionSpec(num_shards=2, seed=3), url, force=False)
    start, stop = info.shards[1]
    args = dict(store=url, split="train", start=start, stop=stop, index=1, task=info.task,
                normalization=info.normalization, dtype="float32", num_classes=10)  # fmt: skip

    resident = load_shard(**args)
    streamed = load_shard(**args, shard_memory="stream")
    again = pickle.loads(pickle.dumps(streamed.x))

    assert streamed.x.num_chunks > 10 and torch.equal(streamed.y, resident.y)
    assert torch.equal(streamed.x[:], resident.x[:])
    picked = torch.tensor([700, 3, 64, 3])
    assert torch.equal(again[picked], resident.x[picked])
    location.remove(url)
