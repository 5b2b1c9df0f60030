"""Every command as a user runs it (issue 15, item 3): `dane train` with the options no other
test runs, `dane evaluate` with and without --best and its errors, a resume that carries the
safeguard's state, and the embedded default store. Where the process boundary is what a test
checks (`python -m`, a scheduler and worker started as a user starts them) they run as real
processes (`dane`); elsewhere through the same cli.main() in this process (`dane_here`,
conftest.py), on the shared cluster where a run needs one. All carry `cluster`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.cluster


def dane(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "DANE_CACHE": str(cache or cwd / "cache")}
    return subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").open()]


COMMON = ("--model", "small-cnn", "--workers", "2", "--dashboard-address", "127.0.0.1:0")


@pytest.fixture(scope="module")
def adam_run(digits_stores, tmp_path_factory, dane_here) -> Path:
    """DANE with Adam local steps, evaluated every 2nd round, 2 threads a worker (a cluster
    this run starts, in this process)."""
    root = tmp_path_factory.mktemp("adam")
    done = dane_here(
        "train", str(digits_stores[4]), *COMMON, "--rounds", "5", "--eval-every", "2",
        "--local-optimizer", "adam", "--local-lr", "0.01", "--threads-per-worker", "2",
        "--local-steps", "10", "--out", str(root / "run"), cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / "run"


def test_eval_every_evaluates_every_nth_round_and_the_last(adam_run):
    rows = _rows(adam_run)

    evaluated = [r["round"] for r in rows if r["test_accuracy"] is not None]
    assert evaluated == [2, 4, 5]
    config = (adam_run / "config.toml").read_text()
    assert 'local_optimizer = "adam"' in config and "threads_per_worker = 2" in config
    assert rows[-1]["test_accuracy"] > 0.5  # Adam trained it (10 classes)


def test_evaluate_prints_the_latest_and_the_best_checkpoints(adam_run, dane_here):
    rows = _rows(adam_run)
    summary = json.loads((adam_run / "summary.json").read_text())
    # best.pt: the round the validation split (the default 0.1) selected, not the best test.
    best_row = rows[summary["best_round"] - 1]
    assert best_row["is_best"] and summary["selected_on"] == "validation"

    latest = dane_here("evaluate", str(adam_run), "--checkpoint", "latest", cwd=adam_run.parent)
    best = dane_here("evaluate", str(adam_run), cwd=adam_run.parent)  # the best, as export
    former = dane_here("evaluate", str(adam_run), "--best", cwd=adam_run.parent)

    pattern = r"^(\w+\.pt) \(round (\d+)\): test loss ([\d.]+), test accuracy ([\d.]+)$"
    name, round_index, loss, accuracy = re.match(pattern, latest.stdout.strip()).groups()
    assert (name, int(round_index)) == ("latest.pt", 5)
    assert float(loss) == pytest.approx(rows[-1]["test_loss"], abs=1e-4)
    assert float(accuracy) == pytest.approx(rows[-1]["test_accuracy"], abs=1e-4)
    name, round_index, _, accuracy = re.match(pattern, best.stdout.strip()).groups()
    assert (name, int(round_index)) == ("best.pt", best_row["round"])
    assert float(accuracy) == pytest.approx(summary["test_accuracy_at_best"], abs=1e-4)
    assert former.stdout == best.stdout  # --best still parses


def test_a_checkpoint_scored_in_this_process_gives_the_runs_own_figures(adam_run, tmp_path):
    # The same scoring as `dane evaluate`, in the test process (so coverage sees it): the
    # saved weights of rounds 5 and the best one, on the test split, equal what the run
    # measured with them on its cluster.
    from dask_dane.pipeline.predict import evaluate_checkpoint

    rows = {r["round"]: r for r in _rows(adam_run) if r["test_accuracy"] is not None}

    for best in (False, True):
        _, round_index, metrics = evaluate_checkpoint(adam_run, best=best)
        assert metrics["accuracy"] == pytest.approx(rows[round_index]["test_accuracy"], abs=1e-6)
        assert metrics["loss"] == pytest.approx(rows[round_index]["test_loss"], rel=1e-5)
    other = tmp_path / "other"
    shutil.copytree(adam_run, other)
    config = (other / "config.toml").read_text()
    (other / "config.toml").write_text(config.replace('"small-cnn"', '"mlp"'))
    with pytest.raises(ValueError, match="does not fit model 'mlp'"):
        evaluate_checkpoint(other)


def test_evaluate_refuses_a_checkpoint_of_another_model_or_version(adam_run, tmp_path, dane_here):
    other = tmp_path / "other"
    other.mkdir()
    (other / "checkpoints").mkdir()
    config = (adam_run / "config.toml").read_text().replace('"small-cnn"', '"mlp"')
    (other / "config.toml").write_text(config)
    (other / "checkpoints" / "latest.pt").write_bytes(
        (adam_run / "checkpoints" / "latest.pt").read_bytes()
    )
    future = tmp_path / "future"
    future.mkdir()
    (future / "checkpoints").mkdir()
    (future / "config.toml").write_text((adam_run / "config.toml").read_text())
    saved = torch.load(adam_run / "checkpoints" / "latest.pt", weights_only=True)
    torch.save({**saved, "checkpoint_version": 999}, future / "checkpoints" / "latest.pt")

    mismatch = dane_here("evaluate", str(other), cwd=tmp_path)
    unknown = dane_here("evaluate", str(future), cwd=tmp_path)

    for done, message in ((mismatch, "does not fit model 'mlp'"), (unknown, "unknown version")):
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and message in done.stderr
        assert "Traceback" not in done.stderr


def test_a_resumed_safeguarded_run_ends_where_an_unbroken_one_does(
    digits_stores, tmp_path, cluster_client, dane_here
):
    # eta 4 overshoots, so the safeguard rejects steps: its anchor, step and halvings must
    # survive the checkpoint for the resumed run to take the same decisions. On every row:
    # with 10 % held out, these settings overshoot in no round.
    args = (str(digits_stores[2]), "--model", "small-cnn", "--safeguard", "backtrack",
            "--eta", "4", "--local-steps", "5", "--dtype", "float64", "--val-fraction", "0",
            "--scheduler", cluster_client.scheduler.address)  # fmt: skip
    whole, first = (
        dane_here("train", *args, "--rounds", rounds, "--out", str(tmp_path / out), cwd=tmp_path)
        for rounds, out in (("6", "whole"), ("3", "split"))
    )
    rest = dane_here(
        "train", "--rounds", "6", "--out", str(tmp_path / "split"), "--resume", cwd=tmp_path
    )

    assert whole.returncode == first.returncode == rest.returncode == 0, rest.stderr
    unbroken, resumed = _rows(tmp_path / "whole"), _rows(tmp_path / "split")
    rejected = [r["safeguard_rejected"] for r in unbroken]
    assert 0 < sum(rejected) < 6  # the safeguard acted, and not on every round
    assert [r["safeguard_rejected"] for r in resumed] == rejected
    assert [r["train_loss"] for r in resumed] == [r["train_loss"] for r in unbroken]
    weights = [
        torch.load(tmp_path / run / "checkpoints" / "latest.pt", weights_only=True)["weights"]
        for run in ("whole", "split")
    ]
    assert torch.equal(*weights)


def test_train_without_a_store_prepares_and_reuses_the_embedded_default(
    tmp_path, cluster_client, dane_here
):
    cache, scheduler = tmp_path / "cache", ("--scheduler", cluster_client.scheduler.address)

    def train(out: str) -> subprocess.CompletedProcess:
        args = ("train", "--rounds", "1", "--out", str(tmp_path / out), *scheduler)
        return dane_here(*args, cwd=tmp_path, cache=cache)

    first, again = train("a"), train("b")

    assert first.returncode == again.returncode == 0, first.stderr
    stores = list(cache.rglob("zarr.json"))
    assert stores and all("digits" in str(p) for p in stores)
    accuracy = [_rows(tmp_path / run)[-1]["test_accuracy"] for run in ("a", "b")]
    assert accuracy[0] == accuracy[1] > 0.3  # the same store and seed: the same result


def test_prepare_takes_every_partition_and_size_option(tmp_path, dane_here):
    from dask_dane.datasets.store import label_histograms, open_store

    store = tmp_path / "s.zarr"
    prepare = ("prepare", "synthetic", "--out", str(store), "--samples", "400",
               "--image-size", "6", "--test-fraction", "0.25", "--seed", "2")  # fmt: skip
    skew = ("--shards", "4", "--partition", "label-skew", "--classes-per-shard", "3")

    dirichlet = dane_here(*prepare, "--shards", "3", "--partition", "dirichlet", "--alpha",
                          "0.3", cwd=tmp_path)  # fmt: skip
    first = open_store(store)
    kept = dane_here(*prepare, *skew, cwd=tmp_path)
    forced = dane_here(*prepare, *skew, "--force", cwd=tmp_path)
    second = open_store(store)

    assert dirichlet.returncode == 0, dirichlet.stderr
    assert first.num_train + first.num_test == 400 and first.sample_shape == (1, 6, 6)
    assert abs(first.num_test - 100) <= 5  # a quarter of each class, rounded per class
    assert first.partition == {"kind": "dirichlet", "seed": 2, "alpha": 0.3}
    assert kept.returncode == 2 and "--force" in kept.stderr  # not replaced without --force
    assert forced.returncode == 0, forced.stderr
    assert second.num_shards == 4 and second.partition["classes_per_shard"] == 3
    assert all((h > 0).sum() <= 3 for h in label_histograms(second))


def test_train_finds_its_scheduler_through_a_scheduler_file(digits_stores, tmp_path, dane_here):
    # The HPC convention: `dask scheduler --scheduler-file F` writes F, workers and the
    # driver read the address from it. Here: a real scheduler and worker, as a user starts them.
    file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False"}
    py = [sys.executable, "-m"]
    scheduler = subprocess.Popen(
        [*py, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--no-dashboard", "--scheduler-file", str(file)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker = subprocess.Popen(
        [*py, "distributed.cli.dask_worker", "--scheduler-file", str(file), "--nthreads", "1",
         "--host", "127.0.0.1", "--no-dashboard"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # The scheduler writes the file once it listens (a driver started before that is
        # told the file does not exist, tests/cli/test_cli_errors.py).
        waited = 0.0
        while not file.exists() and waited < 60:
            time.sleep(0.1)
            waited += 0.1
        done = dane_here(
            "train", str(digits_stores[2]), "--model", "small-cnn", "--rounds", "2",
            "--local-steps", "5", "--scheduler-file", str(file), "--timeout", "60",
            "--out", str(tmp_path / "run"), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [r["round"] for r in _rows(tmp_path / "run")] == [1, 2]
        # The benches that train on one cluster take the same file.
        toml = tmp_path / "runs.toml"
        toml.write_text('[defaults]\nmodel = "small-cnn"\nrounds = 1\nlocal_steps = 3\n'
                        '[[run]]\nname = "fedavg"\nalgorithm = "fedavg"\n')  # fmt: skip
        bench = dane_here(
            "bench", "train", "--config", str(toml), "--store", str(digits_stores[2]),
            "--scheduler-file", str(file), "--json", str(tmp_path / "bench.json"),
            "--workdir", str(tmp_path / "bench"), cwd=tmp_path,
        )  # fmt: skip
        assert bench.returncode == 0, bench.stderr
        (run,) = json.loads((tmp_path / "bench.json").read_text())["runs"]
        assert run["error"] is None and run["config"]["scheduler_file"] == str(file)
        written = file.read_text()
    finally:
        for proc in (worker, scheduler):
            proc.terminate()
            proc.wait(30)
    # A scheduler killed without cleaning up leaves its file behind (this one removed it on
    # its way out): a stale file is one clear line.
    file.write_text(written)
    stale = dane_here(
        "train", str(digits_stores[2]), "--scheduler-file", str(file), "--timeout", "5",
        "--out", str(tmp_path / "stale"), cwd=tmp_path,
    )  # fmt: skip
    assert stale.returncode == 2, stale.stderr
    (line,) = stale.stderr.strip().splitlines()
    assert f"from --scheduler-file {file}: stale?" in line
    assert not (tmp_path / "stale").exists()


def test_version_and_python_dash_m_run_the_same_app(tmp_path):
    import dask_dane

    def module(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dask_dane", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    # Three processes that do not depend on each other: side by side.
    with ThreadPoolExecutor(max_workers=3) as pool:
        script = pool.submit(dane, "--version", cwd=tmp_path)
        by_module = pool.submit(module, "--version")
        refused = pool.submit(module, "info", str(tmp_path / "absent.zarr"))
        by_script, by_module, refused = script.result(), by_module.result(), refused.result()

    assert by_script.returncode == by_module.returncode == 0
    assert by_script.stdout == by_module.stdout == f"dask-dane {dask_dane.__version__}\n"
    assert refused.returncode == 2 and "does not exist" in refused.stderr
