"""`dane export`: a program plain PyTorch loads without dask-dane, scored on the test split to
the run's own accuracy; the state-dict form; bad input refused with one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.cluster

# Scores an exported program on a store's test split with torch and zarr alone: an import of
# dask_dane anywhere in the process fails, and the end checks sys.modules too.
SCORE = textwrap.dedent(
    """
    import sys

    class NoDaskDane:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "dask_dane":
                raise ImportError("dask_dane must not be imported here")

    sys.meta_path.insert(0, NoDaskDane())
    import torch, zarr
    program = torch.export.load(sys.argv[1]).module()
    group = zarr.open_group(sys.argv[2], mode="r")
    x = torch.from_numpy(group["test/x"][:]).float()
    y = torch.from_numpy(group["test/y"][:])
    with torch.no_grad():
        accuracy = (program(x).argmax(1) == y).double().mean().item()
    assert not any(m.split(".")[0] == "dask_dane" for m in sys.modules)
    print(repr(accuracy))
    """
)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, digits_stores, user_models_text, dane_here):
    """A 2-round run of a BatchNorm + dropout model from a user's file. `dane train` and
    `dane export` run in this process (dane_here): what they write is what the tests read;
    only the scoring without dask_dane needs a process of its own."""
    root = tmp_path_factory.mktemp("export")
    (root / "my_models.py").write_text(user_models_text)
    done = dane_here(
        "train", str(digits_stores[2]), "--model", f"{root / 'my_models.py'}:build",
        "--algorithm", "fedavg", "--rounds", "2", "--local-steps", "10", "--out", "run",
        "--dashboard-address", "127.0.0.1:0", cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root


def _best_row(root) -> dict:
    """The metrics row of the round best.pt holds, the one `dane export` writes by default."""
    best = json.loads((root / "run" / "summary.json").read_text())["best_round"]
    rows = (root / "run" / "metrics.jsonl").read_text().splitlines()
    return next(row for row in map(json.loads, rows) if row["round"] == best)


def test_the_program_scores_the_runs_accuracy_without_dask_dane(
    trained_run, digits_stores, dane_here
):
    exported = dane_here("export", "run", "--out", "model.pt2", cwd=trained_run)
    scored = subprocess.run(
        [sys.executable, "-I", "-c", SCORE, "model.pt2", str(digits_stores[2])],
        cwd=trained_run, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert exported.returncode == 0, exported.stderr
    assert scored.returncode == 0, scored.stderr
    assert float(scored.stdout) == _best_row(trained_run)["test_accuracy"]  # the default


def test_the_state_dict_loads_into_the_users_own_network(trained_run, digits_stores, dane_here):
    import torch
    import zarr

    exported = dane_here(
        "export", "run", "--out", "model.pt", "--format", "state-dict", cwd=trained_run
    )

    assert exported.returncode == 0, exported.stderr
    saved = torch.load(trained_run / "model.pt", weights_only=True)
    namespace: dict = {}
    exec((trained_run / "my_models.py").read_text(), namespace)
    model = namespace["build"](in_channels=1, num_classes=10)
    model.load_state_dict(saved["state_dict"])
    model.eval()
    group = zarr.open_group(str(digits_stores[2]), mode="r")
    mean, std = saved["normalization"]["mean"][0], saved["normalization"]["std"][0]
    x = (torch.from_numpy(group["test/x"][:]).float() - mean) / std
    y = torch.from_numpy(group["test/y"][:])
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).double().mean().item()
    best = _best_row(trained_run)
    assert accuracy == pytest.approx(best["test_accuracy"], abs=1e-12)
    assert saved["state_dict"]["1.num_batches_tracked"].item() == 10 * best["round"]


def test_an_existing_file_is_kept_and_a_missing_run_is_named(trained_run, dane_here):
    (trained_run / "keep.pt2").write_bytes(b"earlier")

    exists = dane_here("export", "run", "--out", "keep.pt2", cwd=trained_run)
    missing = dane_here("export", "no-such-run", "--out", "m.pt2", cwd=trained_run)
    bad_format = dane_here("export", "run", "--out", "m.onnx", "--format", "onnx", cwd=trained_run)

    for result, message in [
        (exists, "already exists; pass --force"),
        (missing, "is not a run directory"),
        (bad_format, "unknown --format 'onnx'"),
    ]:
        assert result.returncode == 2
        assert message in result.stderr and result.stderr.count("\n") == 1
    assert (trained_run / "keep.pt2").read_bytes() == b"earlier"
    assert not (trained_run / "m.pt2").exists() and not (trained_run / "m.onnx").exists()


# The exported program's logits on the test split's first image and on all of it.
LOGITS = textwrap.dedent(
    """
    import sys
    import torch, zarr
    program = torch.export.load(sys.argv[1]).module()
    x = torch.from_numpy(zarr.open_group(sys.argv[2], mode="r")["test/x"][:]).float()
    with torch.no_grad():
        torch.save({"one": program(x[:1]), "all": program(x)}, sys.argv[3])
    """
)


def test_the_programs_logits_are_the_loaded_models_at_batch_one_and_n(
    trained_run, digits_stores, dane_here
):
    # Accuracy hides a small change in the logits (a shifted normalisation, a lost eval
    # mode on one layer) and a program that refuses a batch of one; the logits show both.
    import torch
    import zarr

    import dask_dane
    from dask_dane.pipeline.trained import read_trained

    exported = dane_here("export", "run", "--out", "logits.pt2", cwd=trained_run)
    done = subprocess.run(
        [sys.executable, "-c", LOGITS, "logits.pt2", str(digits_stores[2]), "logits.pt"],
        cwd=trained_run, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert exported.returncode == 0, exported.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    logits = torch.load(trained_run / "logits.pt")
    stats = read_trained(trained_run / "run")["model"]["normalization"]
    raw = torch.from_numpy(zarr.open_group(str(digits_stores[2]), mode="r")["test/x"][:]).float()
    x = (raw - stats["mean"][0]) / stats["std"][0]  # one channel: the store's mean and std
    model = dask_dane.load(trained_run / "run", best=True)  # export's default: best.pt
    with torch.no_grad():
        expected = model(x)
    assert logits["all"].shape == (len(raw), 10) and logits["one"].shape == (1, 10)
    torch.testing.assert_close(logits["all"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits["one"], expected[:1], rtol=1e-5, atol=1e-5)
