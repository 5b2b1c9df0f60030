"""`dane bench prepare-memory`: one child process per size, its peak RSS read and recorded."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dask_dane.bench.prepare.run import peak_rss
from dask_dane.cli.commands import app

pytestmark = pytest.mark.bench


def test_prepare_memory_records_each_size_with_its_peak_and_draws_the_figure(tmp_path):
    out, figure = tmp_path / "m.json", tmp_path / "m.png"

    done = CliRunner().invoke(
        app,
        ["bench", "prepare-memory", "--sizes", "40,80", "--image-size", "4", "--shards", "2",
         "--json", str(out), "--plot", str(figure)],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())
    assert [r["rows"] for r in result["runs"]] == [40, 80]
    assert [r["data_bytes"] for r in result["runs"]] == [40 * 64, 80 * 64]  # 4x4 float32
    # A Python process that imported NumPy and zarr: tens of MiB, not the bench's own size
    # (which it would read if the pages held between fork and exec were counted).
    assert all(20 * 2**20 < r["peak_rss_bytes"] < 200 * 2**20 for r in result["runs"])
    assert "command" in result  # the argv of the process (here pytest's)
    assert figure.stat().st_size > 0
    assert "| 80 |" in done.output


def test_prepare_memory_of_an_image_tree_counts_its_uint8_bytes(tmp_path):
    out = tmp_path / "m.json"

    done = CliRunner().invoke(
        app,
        ["bench", "prepare-memory", "--source", "images", "--sizes", "30", "--image-size", "5",
         "--shards", "2", "--json", str(out)],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())
    assert result["source"] == "images"
    assert [(r["rows"], r["data_bytes"]) for r in result["runs"]] == [(30, 30 * 25)]
    assert result["runs"][0]["peak_rss_bytes"] > 20 * 2**20


def test_a_failing_prepare_names_its_command_and_problem():
    try:
        peak_rss(["prepare", "no-such-source", "--out", "/nonexistent/x.zarr"])
    except RuntimeError as err:
        assert "no-such-source" in str(err) and "unknown source" in str(err)
    else:
        raise AssertionError("a failing child must raise")
