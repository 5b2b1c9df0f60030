"""Bad input through the real `dane` command: exit 2, one line naming the problem and the fix,
no traceback, nothing written, existing files untouched. Complements test_cli_errors.py (the
cases it holds are not repeated here) with damaged stores, more settings and --resume.
Ends with property-based tests: random malformed configs and randomly damaged stores fail
with a clean ValueError, never another exception.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dask_dane.datasets.integrity import DIGEST_KEY, metadata_digest
from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import FORMAT_VERSION, open_store, write_store
from dask_dane.pipeline.engine.round.shards import load_shard
from dask_dane.pipeline.setup.config import RunConfig, read_toml, to_toml
from dask_dane.pipeline.setup.run_setup import prepare_run


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in [folder, *folder.rglob("*")]}


def _chunk(store: Path, array: str) -> Path:
    """The first chunk file of `array` (e.g. "train/x")."""
    return sorted(p for p in (store / array / "c").rglob("*") if p.is_file())[0]


def _edit_attrs(store: Path, *, sign: bool = True, **attrs) -> None:
    """Change attributes; `sign`: and the metadata digest with them, as a store written that
    way would carry, so that the content checks behind the digest are what is tested."""
    group = zarr.open_group(store, mode="r+", zarr_format=3)
    group.attrs.update(attrs)
    if sign:
        group.attrs[DIGEST_KEY] = metadata_digest(group, dict(group.attrs))


def _edit_rows(store: Path, array: str, rows: slice, value) -> None:
    zarr.open_group(store, mode="r+", zarr_format=3)[array][rows] = value


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A good store of 8x8 synthetic images and damaged copies of it, a TOML and a run dir."""
    root = tmp_path_factory.mktemp("bad-inputs")
    raw = load_source("synthetic", SourceOptions(samples=200, image_size=8))
    good = Path(write_store(raw, PartitionSpec(num_shards=2), root / "good.zarr", force=False).path)
    num_train = open_store(good).num_train
    paths = {"good": good, "root": root}

    def damaged(name: str, damage) -> None:
        path = root / f"{name}.zarr"
        shutil.copytree(good, path)
        damage(path)
        paths[name] = path

    damaged("other-layout", lambda p: shutil.rmtree(p / "train"))
    damaged("version", lambda p: _edit_attrs(p, format_version=FORMAT_VERSION + 98))
    damaged("corrupt", lambda p: _flip_byte(_chunk(p, "train/x")))
    damaged("truncated", lambda p: _truncate(_chunk(p, "train/y")))
    damaged("deleted", lambda p: _chunk(p, "train/x").unlink())  # zarr would read zeros
    damaged("labels", lambda p: _edit_rows(p, "train/y", slice(5, 6), 10))
    damaged("nan", lambda p: _edit_rows(p, "train/x", slice(3, 4), np.nan))
    damaged("inf", lambda p: _edit_rows(p, "train/x", slice(7, 8), np.inf))
    few = [[i, i + 1] for i in range(num_train)] + [[num_train, num_train]]
    damaged("few-samples", lambda p: _edit_attrs(p, shards=few))
    damaged("edited", lambda p: _edit_attrs(p, sign=False, shards=few))
    damaged("empty-shard", lambda p: _edit_attrs(p, shards=[[0, 0], [0, num_train]]))
    (root / "wrong-type.toml").write_text('rounds = "ten"\n')
    (root / "a-file").write_text("not a folder")
    run = root / "run"
    run.mkdir()
    (run / "config.toml").write_text(to_toml(RunConfig(store=str(good), out=str(run))))
    paths.update(wrong_type=root / "wrong-type.toml", a_file=root / "a-file", run=run)
    return paths


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


# Arguments (split at spaces, {name} filled from `inputs`; {out} must not exist afterwards)
# and fragments the error line must contain. Shard-level damage is found when the shard loads
# on its worker, before any round, and still writes nothing. The command runs in this process
# (cli.main, as the `dane` script does) against the shared cluster, to keep the cases cheap.
TRAIN = "train --rounds 1 --local-steps 1 --scheduler {scheduler}"
BAD_INPUT = {
    "store-other-layout": (f"{TRAIN} {{other-layout}} --out {{out}}", ["dask-dane layout"]),
    "store-format-version": (f"{TRAIN} {{version}} --out {{out}}", ["format_version 99"]),
    "store-corrupt-chunk": (f"{TRAIN} {{corrupt}} --out {{out}}", ["shard 0", "corrupted"]),
    "store-truncated-chunk": (f"{TRAIN} {{truncated}} --out {{out}}", ["shard 0", "truncated"]),
    "store-deleted-chunk": (
        f"{TRAIN} {{deleted}} --out {{out}}",
        ["the chunk of train/x holding rows [0, ", "shards 0, 1 is missing", "--force"],
    ),
    "store-labels-out-of-range": (f"{TRAIN} {{labels}} --out {{out}}", ["outside [0, 10)"]),
    "store-nan-features": (f"{TRAIN} {{nan}} --out {{out}}", ["shard 0", "NaN or infinite"]),
    "store-inf-features": (f"{TRAIN} {{inf}} --out {{out}}", ["shard 0", "NaN or infinite"]),
    "store-fewer-samples-than-shards": (f"{TRAIN} {{few-samples}} --out {{out}}", ["shards"]),
    "store-empty-shard": (f"{TRAIN} {{empty-shard}} --out {{out}}", ["shard 0 is empty"]),
    "store-edited-attributes": (f"{TRAIN} {{edited}} --out {{out}}", ["digest mismatch"]),
    "eta-0": (f"{TRAIN} {{good}} --eta 0 --out {{out}}", ["--eta"]),
    "eta-negative": (f"{TRAIN} {{good}} --eta -1 --out {{out}}", ["--eta"]),
    "mu-negative": (f"{TRAIN} {{good}} --mu -0.5 --out {{out}}", ["--mu"]),
    "batch-size-0": (f"{TRAIN} {{good}} --batch-size 0 --out {{out}}", ["--batch-size"]),
    "config-wrong-type": (
        f"{TRAIN} {{good}} --config {{wrong_type}} --out {{out}}",
        ["'rounds'", "must be int"],
    ),
    "out-not-writable": (f"{TRAIN} {{good}} --out {{a_file}}/run", ["cannot write", "--out"]),
    "tls-cert-without-key": (
        f"{TRAIN} {{good}} --tls-cert {{wrong_type}} --out {{out}}",
        ["--tls-cert and --tls-key"],
    ),
    "resume-other-store": (f"{TRAIN} {{version}} --out {{run}} --resume", ["--resume", "store"]),
    "resume-other-model": (
        f"{TRAIN} --model mlp --out {{run}} --resume",
        ["--resume", "model = 'small-cnn'"],
    ),
}


@pytest.mark.cluster
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    case, inputs, cluster_client, tmp_path, monkeypatch, capfd, run_cli, assert_one_line_error
):
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("DANE_CACHE", str(folder / "cache"))
    out = folder / "out"
    fill = {**inputs, "out": out, "scheduler": cluster_client.scheduler.address}
    argv = [a.format(**fill) for a in BAD_INPUT[case][0].split()]
    before = _listing(inputs["root"])
    capfd.readouterr()

    status = run_cli(argv)

    assert_one_line_error(status, capfd, BAD_INPUT[case][1])
    assert not out.exists()
    assert list(folder.iterdir()) == []  # no run dir, no default store in DANE_CACHE
    assert _listing(inputs["root"]) == before  # stores, files, the existing run: untouched


# --- Property-based: random malformed configs, randomly damaged stores -------------------

FIELDS = list(RunConfig.__dataclass_fields__)
toml_values = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_./0123456789 ", max_size=12),
    st.booleans(),
    st.lists(st.integers(-3, 3), max_size=3),
)
keys = st.one_of(st.sampled_from(FIELDS), st.text(alphabet="abcdefghijklmnop_-", min_size=1))


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


@settings(max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, toml_values, max_size=6))
@example({"rounds": 7, "local-lr": 0.25, "algorithm": "fedavg", "out": "runs/x"})  # accepted
@example({"local-lr": 0.25, "local_lr": 0.5})  # refused: one key given twice
def test_random_config_files_give_a_config_or_one_clean_value_error(entries):
    text = "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in entries.items())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.toml"
        path.write_text(text)

        try:
            config = RunConfig(**read_toml(path)).validate()
        except ValueError as err:
            assert "\n" not in str(err)
            assert str(err)
        else:  # accepted: every entry is a setting, and the config holds its value
            for key, value in entries.items():  # `a-b` beside `a_b` is refused: given twice
                field = key.replace("-", "_")
                assert field in FIELDS, key
                held = getattr(config, field)
                assert held == value or (_is_nan(held) and _is_nan(value)), (key, held)


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    raw = load_source("synthetic", SourceOptions(samples=40, image_size=4))
    path = tmp_path_factory.mktemp("tiny") / "tiny.zarr"
    return Path(write_store(raw, PartitionSpec(num_shards=2), path, force=False).path)


attr_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 300),
        st.floats(allow_nan=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.floats(0, 1)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(
        st.just("attr"),
        st.sampled_from(
            ["format_version", "task", "num_classes", "shards", "normalization", "partition", "l2"]
        ),
        attr_values,
    ),
)


def _apply(store: Path, how: tuple) -> None:
    files = sorted(p for p in store.rglob("*") if p.is_file())
    kind = how[0]
    if kind == "attr":
        try:  # an earlier damage may have deleted or garbled the group's metadata
            metadata = json.loads((store / "zarr.json").read_text())
            metadata["attributes"][how[1]] = how[2]
        except (OSError, ValueError, KeyError, TypeError):
            return
        (store / "zarr.json").write_text(json.dumps(metadata))
        return
    path = files[how[1] % len(files)]
    data = bytearray(path.read_bytes())
    if kind == "flip" and data:
        data[how[2] % len(data)] ^= how[3]
    elif kind == "truncate":
        data = data[: int(len(data) * how[2])]
    elif kind == "delete":
        path.unlink()
        return
    path.write_bytes(bytes(data))


@settings(max_examples=40, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(damage, min_size=1, max_size=3))
def test_randomly_damaged_stores_load_or_fail_with_one_clean_value_error(tiny_store, damages):
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder) / "s.zarr"
        shutil.copytree(tiny_store, store)
        for how in damages:
            _apply(store, how)

        try:
            loaded = _load_everything(store)
        except ValueError as err:
            assert "\n" not in str(err)
            assert str(err)
            return
        # Loaded despite the damage: then it must be exactly what was written, never
        # plausible wrong data (a damage that changed nothing read, such as a codec level).
        for got, expected in zip(loaded, _load_everything(tiny_store), strict=True):
            assert torch.equal(got.x.dense(), expected.x.dense()) and torch.equal(got.y, expected.y)


def _load_everything(store: Path) -> list:
    info = open_store(store)
    setup = prepare_run(RunConfig(store=str(store), model="mlp"))
    shards = [load_shard(**setup.shard_args(i)) for i in range(info.num_shards)]
    return [*shards, load_shard(**setup.test_args())]
