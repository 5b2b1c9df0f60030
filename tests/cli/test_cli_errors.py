"""The real `dane` command on bad input: exit 2, one line on stderr, no traceback, no writes."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from dask_dane.datasets.partition import PartitionSpec
from dask_dane.datasets.sources import SourceOptions, load_source
from dask_dane.datasets.store import label_histograms, open_store, write_store


def run_dane(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", *args],
        cwd=cwd,
        env={**os.environ, "DANE_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _listing(folder: Path) -> dict[str, int]:
    """Every path under `folder` (itself included) with its modification time in ns."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in [folder, *folder.rglob("*")]}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Stores of 8x8 and 12x12 synthetic images, a plain folder and a TOML with a typo."""
    root = tmp_path_factory.mktemp("inputs")
    for size in (8, 12):
        raw = load_source("synthetic", SourceOptions(samples=200, image_size=size))
        write_store(raw, PartitionSpec(num_shards=2), root / f"s{size}.zarr", force=False)
    (root / "plain").mkdir()
    (root / "plain" / "readme.txt").write_text("not a store")
    (root / "typo.toml").write_text("rounds = 2\nlocal_rl = 0.1\n")
    (root / "twice.toml").write_text("local_lr = 0.1\n[solver]\nlocal_lr = 0.2\n")
    (root / "misplaced.toml").write_text("[server]\nlocal_lr = 0.2\n")
    return {
        "s8": root / "s8.zarr",
        "s12": root / "s12.zarr",
        "plain": root / "plain",
        "typo": root / "typo.toml",
        "twice": root / "twice.toml",
        "misplaced": root / "misplaced.toml",
        "root": root,
    }


# Arguments (split at spaces, then {name} filled from `inputs`; {out} is a path that must
# not exist afterwards) and a fragment the error line must contain.
BAD_INPUT = {
    "train-missing-store": ("train {root}/absent.zarr --out {out}", "does not exist"),
    "train-plain-folder": ("train {plain} --out {out}", "not a zarr"),
    "train-unknown-algorithm": ("train {s8} --algorithm newton --out {out}", "'newton'"),
    "train-unknown-model": ("train {s8} --model resnet1000 --out {out}", "'resnet1000'"),
    "train-model-misfit": ("train {s12} --model small-cnn --out {out}", "(1, 12, 12)"),
    "train-rounds-0": ("train {s8} --rounds 0 --out {out}", "--rounds"),
    "train-workers-0": ("train {s8} --workers 0 --out {out}", "--workers"),
    "train-local-steps-0": ("train {s8} --local-steps 0 --out {out}", "--local-steps"),
    "train-local-lr-0": ("train {s8} --local-lr 0 --out {out}", "--local-lr"),
    "train-local-lr-negative": ("train {s8} --local-lr -1 --out {out}", "--local-lr"),
    "train-config-unknown-key": ("train {s8} --config {typo} --out {out}", "'local_rl'"),
    "train-config-key-twice": (
        "train {s8} --config {twice} --out {out}",
        "'local_lr' is given twice, at the top level and in [solver]",
    ),
    "train-config-wrong-section": (
        "train {s8} --config {misplaced} --out {out}",
        "'local_lr' belongs in [solver], not [server]",
    ),
    # A nested --out: the folders above the run directory must not be left behind either.
    "train-no-scheduler": (
        "train {s8} --scheduler tcp://127.0.0.1:9 --timeout 1 --out {out}/a/b",
        "no Dask scheduler answered",
    ),
    "train-missing-scheduler-file": (
        "train {s8} --scheduler-file {root}/none.json --out {out}",
        "--scheduler-file",
    ),
    "train-scheduler-file-not-json": (
        "train {s8} --scheduler-file {typo} --out {out}",
        "cannot be read as JSON",
    ),
    "train-two-schedulers": (
        "train {s8} --scheduler tcp://127.0.0.1:9 --scheduler-file {typo} --out {out}",
        "both name a scheduler",
    ),
    "bench-train-two-schedulers": (
        "bench train --config {typo} --json {out}/r.json --scheduler tcp://127.0.0.1:9 "
        "--scheduler-file {typo}",
        "both name a scheduler",
    ),
    "train-local-clip-negative": ("train {s8} --local-clip -1 --out {out}", "--local-clip"),
    "train-jobs-without-a-queue": ("train {s8} --jobs 2 --out {out}", "pass --cluster slurm"),
    "train-unknown-cluster": ("train {s8} --cluster k8s --out {out}", "unknown --cluster 'k8s'"),
    "train-queue-beside-scheduler": (
        "train {s8} --cluster slurm --scheduler tcp://127.0.0.1:9 --out {out}",
        "names a running one",
    ),
    "watch-interval-0": ("watch {root} --interval 0", "--interval"),
    "prepare-unknown-source": ("prepare imagenet --out {out}", "unknown source 'imagenet'"),
    "prepare-existing-store": ("prepare synthetic --out {s8}", "--force"),
}


# The cases run as the real `dane` script in a process of their own: what only a process
# shows (its exit status, a traceback printed on the way out, Dask's logging while a
# scheduler is sought). The others are checks of settings and inputs that the same main()
# makes in this process (conftest's `dane_here`): an interpreter start costs 4 s of CPU (torch).
IN_OWN_PROCESS = ("train-missing-store", "train-no-scheduler", "prepare-existing-store")


@pytest.fixture(scope="module")
def bad_input_runs(inputs, tmp_path_factory, dane_here) -> dict[str, tuple]:
    """Every BAD_INPUT case, each in its own folder: IN_OWN_PROCESS side by side in
    subprocesses while the others run in this process, one after another.

    Returns per case: (result, out path, its folder, listing of the inputs before, after).
    """
    before = _listing(inputs["root"])

    def run(case: str, runner) -> tuple:
        folder = tmp_path_factory.mktemp(case)
        out = folder / "out"
        argv = [a.format(out=out, **inputs) for a in BAD_INPUT[case][0].split()]
        return runner(*argv, cwd=folder, cache=folder / "cache"), out, folder

    with ThreadPoolExecutor(max_workers=len(IN_OWN_PROCESS)) as pool:
        own = {case: pool.submit(run, case, run_dane) for case in IN_OWN_PROCESS}
        runs = {case: run(case, dane_here) for case in BAD_INPUT if case not in own}
        runs |= {case: future.result() for case, future in own.items()}
    after = _listing(inputs["root"])
    return {case: (*runs[case], before, after) for case in BAD_INPUT}


@pytest.mark.cluster
@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(case, bad_input_runs):
    result, out, folder, inputs_before, inputs_after = bad_input_runs[case]

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert BAD_INPUT[case][1] in lines[0]
    assert not out.exists()
    assert list(folder.iterdir()) == []  # no run dir, no default store in DANE_CACHE
    assert inputs_after == inputs_before  # the stores, the folder and the TOML are untouched


def test_prepare_then_info_prints_every_shard_with_its_labels(tmp_path, dane_here):
    # In this process (dane_here): what is checked is the commands' output and exit status.
    store = tmp_path / "s.zarr"
    cache = tmp_path / "cache"

    prepare_args = ["prepare", "synthetic", "--samples", "200", "--shards", "3", "--out"]
    prepared = dane_here(*prepare_args, str(store), cwd=tmp_path, cache=cache)
    shown = dane_here("info", str(store), cwd=tmp_path, cache=cache)

    assert prepared.returncode == 0, prepared.stderr
    assert "3 shards" in prepared.stdout
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^shards:\s+3$", shown.stdout, re.MULTILINE)
    rows = re.findall(
        r"shard +(\d+): rows \[(\d+), (\d+)\) +(\d+) samples +labels ([\d ]+)$",
        shown.stdout,
        re.MULTILINE,
    )
    assert [int(index) for index, *_ in rows] == [0, 1, 2]
    info = open_store(store)
    histograms = label_histograms(info)
    for (_, start, stop, samples, labels), shard, histogram in zip(
        rows, info.shards, histograms, strict=True
    ):
        counts = [int(c) for c in labels.split()]
        assert (int(start), int(stop)) == shard
        assert counts == histogram.tolist()
        assert sum(counts) == int(samples) == shard[1] - shard[0]
    assert sum(int(samples) for *_, samples, _ in rows) == info.num_train
    assert re.search(r"^labels no shard holds: none$", shown.stdout, re.MULTILINE)
    assert info.num_train + info.num_test == 200


def test_info_names_the_labels_that_no_shard_holds(tmp_path, dane_here):
    raw = load_source("synthetic", SourceOptions(seed=0, samples=300))
    y_train = raw.y_train.copy()
    y_train[np.isin(y_train, (3, 7))] = 4  # labels 3 and 7 only in the test split
    store = tmp_path / "s.zarr"
    write_store(
        dataclasses.replace(raw, y_train=y_train),
        PartitionSpec(num_shards=2, seed=0),
        store,
        force=False,
    )

    shown = dane_here("info", str(store), cwd=tmp_path, cache=tmp_path / "cache")

    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^labels no shard holds: 3 7 ", shown.stdout, re.MULTILINE)
    assert 3 in raw.y_test and 3 in raw.y_train  # the source had them: the store lost them
