"""The package's face: what dir() and help() list, the docstrings, the errors a notebook user
sees, TrainResult's repr, prepare from a named source, and the progress lines of train."""

from __future__ import annotations

import inspect
import io
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from torch import nn

import dask_dane
from dask_dane.datasets.store import open_store
from dask_dane.pipeline.keywords import in_keywords
from dask_dane.pipeline.observe.progress import Callbacks, ProgressLines, chain
from dask_dane.pipeline.setup.config import RunConfig, in_flags

API = ("train", "prepare", "load", "TrainResult", "Callbacks")


def test_import_lists_the_api_without_importing_torch():
    code = (
        "import sys, dask_dane; names = dir(dask_dane); dask_dane.Callbacks; "
        "print(all(n in names for n in dask_dane.__all__), 'torch' in sys.modules)"
    )

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_dir_and_all_name_the_api():
    assert set(API) <= set(dask_dane.__all__)
    assert set(API) <= set(dir(dask_dane))
    assert dask_dane.Callbacks is Callbacks


def test_help_shows_each_name_of_the_api():
    page = pydoc.render_doc(dask_dane, renderer=pydoc.plaintext)

    for name in ("train(", "prepare(", "load(", "class TrainResult", "class Callbacks"):
        assert name in page, name


def _documented(doc: str, section: str) -> set[str]:
    """The names a NumPy-style section of a docstring lists (`name`, `name : type`, `a, b`)."""
    body = doc.split(f"\n{section}\n{'-' * len(section)}\n", 1)[1]
    body = re.split(r"\n\n[A-Z]\w+\n-+\n", body)[0]  # up to the next section
    entries = [line for line in body.splitlines() if line and not line[0].isspace()]
    return {n.strip().lstrip("*") for line in entries for n in line.split(" : ")[0].split(",")}


@pytest.mark.parametrize("name", ["train", "prepare", "load"])
def test_the_functions_document_every_parameter_numpy_style(name):
    function = getattr(dask_dane, name)
    doc = inspect.getdoc(function)

    assert "\nReturns\n-------\n" in doc
    assert _documented(doc, "Parameters") == set(inspect.signature(function).parameters)


def test_train_result_and_callbacks_document_their_attributes():
    for cls in (dask_dane.TrainResult, dask_dane.Callbacks):
        fields = set(cls.__dataclass_fields__)
        assert _documented(inspect.getdoc(cls), "Attributes") == fields, cls


def test_train_result_repr_is_one_short_line():
    result = dask_dane.TrainResult(
        model=nn.Linear(2, 2),
        history=[{"round": t, "train_loss": 1.0 / t} for t in range(1, 501)],
        summary={"final_test_accuracy": 0.912345},
        run_dir=Path("runs/dane-1"),
    )

    assert repr(result) == (
        "TrainResult(run_dir='runs/dane-1', rounds=500, test_accuracy=0.9123, model=Linear)"
    )


@pytest.mark.parametrize(
    ("given", "closest"),
    [("local_rate", "local_lr"), ("progres", "progress"), ("callback", "callbacks")],
)
def test_an_unknown_keyword_is_a_type_error_naming_the_closest(given, closest, tmp_path):
    with pytest.raises(TypeError, match=f"argument '{given}'; did you mean '{closest}'") as err:
        dask_dane.train(None, out=tmp_path / "run", **{given: 1})

    assert not isinstance(err.value, ValueError)
    assert not (tmp_path / "run").exists()


def test_a_bad_setting_names_the_keyword_and_the_cli_keeps_its_flag(tmp_path):
    with pytest.raises(ValueError) as err:
        dask_dane.train(None, out=tmp_path / "run", local_lr=0.0)
    with pytest.raises(ValueError) as cli:
        RunConfig(local_lr=0.0).validate()

    assert str(err.value) == "local_lr must be a positive number (got 0.0)"
    assert in_flags(cli.value) == "--local-lr must be a positive number (got 0.0)"
    assert not (tmp_path / "run").exists()


def test_a_refused_resume_says_resume_true(tmp_path):
    (tmp_path / "empty").mkdir()

    with pytest.raises(ValueError, match=r"no config\.toml\); drop resume=True$"):
        dask_dane.train(None, out=tmp_path / "empty", resume=True)


@pytest.mark.parametrize(
    ("flags", "keywords"),
    [
        ("pass --resume to continue it or choose another --out", "pass resume=True to "
         "continue it or choose another out"),
        ("pass --batch-size 8 or more", "pass batch_size=8 or more"),
        ("try a larger --mu or a smaller --local-lr", "try a larger mu or a smaller local_lr"),
        ("use --dtype float32", "use dtype=float32"),
        ("`images:DIR` or --path DIR", "`images:DIR` or path=DIR"),
        ("continue with `dane train --out R --resume`", "continue with `dane train --out R "
         "--resume`"),
    ],
)  # fmt: skip
def test_flags_in_engine_messages_read_as_keywords(flags, keywords):
    assert in_keywords(ValueError(flags)) == keywords


def test_prepare_takes_a_named_source(tmp_path):
    store = dask_dane.prepare(tmp_path / "d.zarr", "digits", shards=3, partition="dirichlet")

    info = open_store(store)
    assert (info.source, info.num_shards, info.num_classes) == ("digits", 3, 10)
    assert info.num_train + info.num_test == 1797
    with pytest.raises(ValueError, match="already exists; pass force=True to replace it"):
        dask_dane.prepare(store, "digits")
    with pytest.raises(TypeError, match="a source or train= and test= arrays, not both"):
        dask_dane.prepare(tmp_path / "x.zarr", "digits", train=(None, None), test=(None, None))
    with pytest.raises(TypeError, match="needs a source"):
        dask_dane.prepare(tmp_path / "x.zarr")


def test_prepare_reads_an_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / "pics" / label).mkdir(parents=True)
        for i in range(5):
            pixels = rng.integers(0, 256, size=(6, 4), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(tmp_path / "pics" / label / f"{i}.png")

    store = dask_dane.prepare(tmp_path / "p.zarr", f"images:{tmp_path / 'pics'}", shards=2)

    info = open_store(store)
    assert (info.num_train, info.num_test, tuple(info.sample_shape)) == (8, 2, (1, 6, 4))
    with pytest.raises(ValueError, match=r"^channels must be 1 \(grey\) or 3"):
        dask_dane.prepare(tmp_path / "q.zarr", f"images:{tmp_path / 'pics'}", channels=2)


def _lines(rows: list[dict], rounds: int = 3) -> list[str]:
    out = io.StringIO()
    lines = ProgressLines(Console(file=out, width=60))
    lines.begin(
        RunConfig(rounds=rounds, algorithm="dane", out="runs/a-long-name", batch_size=32),
        resume=False,
    )
    lines.on_start("http://127.0.0.1:8787/status", 2)
    for row in rows:
        lines.on_round(row)
    lines.end({"rounds": len(rows), "final_test_accuracy": rows[-1]["test_accuracy"]}, "runs/x")
    return out.getvalue().splitlines()


def test_progress_prints_a_line_per_round_with_loss_and_accuracy():
    rows = [
        {"round": 1, "train_loss": 2.0, "test_loss": None, "test_accuracy": None, "wall_s": 1.25},
        {"round": 2, "train_loss": 0.5, "test_loss": 0.4, "test_accuracy": 0.9, "wall_s": 0.5},
    ]

    assert _lines(rows) == [
        "dask-dane: training dane for 3 rounds into runs/a-long-name",
        "dask-dane: cluster: 2 workers",
        "dask-dane: dashboard: http://127.0.0.1:8787/status",
        "dask-dane: DANE page: http://127.0.0.1:8787/dane",
        "round 1/3  train loss 2.0000  test acc -  1.2 s",
        "round 2/3  train loss 0.5000  test acc 0.9000  0.5 s",
        "dask-dane: done after 2 rounds, test accuracy 0.9000",
        "dask-dane: run directory runs/x",
    ]


def test_progress_warns_once_when_a_step_holds_several_noise_scales():
    row = {"round": 2, "train_loss": 1.0, "test_loss": None, "test_accuracy": None, "wall_s": 1}
    rows = [{**row, "noise_scale_ema": 10.0, "num_workers": 2, "round": t} for t in (2, 3)]

    lines = _lines(rows)

    warned = [line for line in lines if line.startswith("warning:")]
    assert len(warned) == 1 and "64 rows a step, 6x the gradient noise scale" in warned[0]
    assert lines.index(warned[0]) == 5  # right after round 2's line


def test_progress_shows_the_test_loss_of_a_regression_and_validation_accuracy():
    rows = [
        {"round": 1, "train_loss": 2.0, "test_loss": 0.25, "test_accuracy": None, "wall_s": 1},
        {"round": 2, "train_loss": 1.0, "val_accuracy": 0.8, "test_accuracy": 0.7, "wall_s": 1},
    ]

    shown = _lines(rows, rounds=10)

    assert shown[4] == "round  1/10  train loss 2.0000  test loss 0.2500  1.0 s"
    assert shown[5] == "round  2/10  train loss 1.0000  val acc 0.8000  test acc 0.7000  1.0 s"


def test_chained_callbacks_are_called_in_order():
    seen: list[tuple] = []
    first = Callbacks(on_round=lambda row: seen.append(("first", row["round"])))
    second = Callbacks(
        on_start=lambda dashboard, workers: seen.append(("start", workers)),
        on_weights=lambda t, w: seen.append(("weights", t)),
    )

    both = chain(first, second)
    both.on_start("http://x", 2)
    both.on_round({"round": 1})
    both.on_weights(1, None)

    assert seen == [("start", 2), ("first", 1), ("weights", 1)]


@pytest.mark.cluster
def test_train_talks_unless_told_not_to(digits_stores, cluster_client, tmp_path, capsys):
    rows, rounds = [], []
    watch = Callbacks(on_round=rows.append, on_weights=lambda t, w: rounds.append(t))
    settings = {"model": "small-cnn", "algorithm": "fedavg", "client": cluster_client}
    settings |= {"rounds": 2, "local_steps": 2, "dashboard_address": "127.0.0.1:0"}

    result = dask_dane.train(digits_stores[2], out=tmp_path / "a", callbacks=watch, **settings)
    talked = capsys.readouterr()
    dask_dane.train(digits_stores[2], out=tmp_path / "b", progress=False, **settings)
    quiet = capsys.readouterr()

    shown = talked.err.splitlines()
    accuracy = result.history[-1]["test_accuracy"]
    assert shown[0] == f"dask-dane: training fedavg for 2 rounds into {tmp_path / 'a'}"
    assert shown[1] == "dask-dane: cluster: 2 workers"  # then short lines, one thing each
    assert shown[2].startswith("dask-dane: shards: auto: resident (shard 0 holds 45 KiB of")
    assert shown[3].startswith("dask-dane: evaluation: test resident (")
    assert shown[4].startswith("dask-dane: collective: ")
    assert shown[5].startswith("dask-dane: dashboard: http")
    assert shown[6].startswith("dask-dane: DANE page: http") and shown[6].endswith("/dane")
    assert shown[7].startswith(f"round 1/2  train loss {result.history[0]['train_loss']:.4f}")
    assert shown[8].startswith("round 2/2  train loss ")
    assert f"test acc {accuracy:.4f}" in shown[8]
    assert shown[9] == f"dask-dane: done after 2 rounds, test accuracy {accuracy:.4f}"
    assert talked.out == ""
    assert (quiet.out, quiet.err) == ("", "")
    assert rows == result.history and rounds == [1, 2]
    assert repr(result).startswith(f"TrainResult(run_dir={str(tmp_path / 'a')!r}, rounds=2")
    with pytest.raises(ValueError, match="pass resume=True to continue it or choose another out"):
        dask_dane.train(digits_stores[2], out=tmp_path / "a", progress=False, **settings)
