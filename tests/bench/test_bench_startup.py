"""`dane bench cli-startup`: each help page timed in fresh processes, its torch import told."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dask_dane.cli.commands import app

pytestmark = pytest.mark.bench


def test_cli_startup_times_each_page_in_fresh_processes_and_says_what_it_imported(
    tmp_path, monkeypatch
):
    # The listing alone: the bench's own pages take seconds (torch), which is not under test.
    monkeypatch.setattr("dask_dane.bench.startup.run.COMMANDS", (("--help",),))
    out, figure = tmp_path / "s.json", tmp_path / "s.png"

    done = CliRunner().invoke(
        app,
        ["bench", "cli-startup", "--repeats", "2", "--json", str(out), "--plot", str(figure)],
    )

    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())
    assert result["repeats"] == 2
    bare, listing = result["runs"]
    assert (bare["command"], listing["command"]) == ("python -c pass", "dane --help")
    assert 0 < listing["min_s"] <= listing["median_s"] <= listing["max_s"]
    assert listing["imports_torch"] is False and "torch" not in listing["imported"]
    assert figure.stat().st_size > 0
    assert "| `dane --help` |" in done.output


def test_cli_startup_refuses_no_repeats():
    done = CliRunner().invoke(app, ["bench", "cli-startup", "--repeats", "0"])

    assert "--repeats must be at least 1" in str(done.exception)
