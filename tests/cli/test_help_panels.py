"""`dane train --help` lists its options in panels (Data ... Cluster, issue 35 item 6): each
setting under the panel its declaration implies, every default shown one way."""

from __future__ import annotations

import dataclasses
import re

from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.pipeline.algorithms.parts.setting_error import flag
from dask_dane.pipeline.setup.config import PANELS, RunConfig, panel_of


def _panels(help_text: str) -> dict[str, list[str]]:
    """Panel title -> the long option names listed under it, in order."""
    panels: dict[str, list[str]] = {}
    title = None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            panels[title] = []
        elif title and (found := re.match(r"  (--[a-z0-9-]+)", line)):
            panels[title].append(found.group(1))
    return panels


def test_train_help_groups_every_option_under_its_panel_in_order():
    result = CliRunner().invoke(app, ["train", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    panels = _panels(result.output)

    titles = [t for t in panels if t in PANELS]
    assert titles == [t for t in PANELS if t in titles]  # the declared order
    assert list(panels)[-1] == "Options" and panels["Options"] == ["--help"]
    assert panels["Local solver"][:2] == ["--local-solver", "--local-steps"]
    assert "--server-lr" in panels["Server step"] and "--server-momentum" in panels["Server step"]
    assert {"--eta", "--mu", "--correction"} <= set(panels["Algorithm"])
    assert {"--out", "--rounds", "--config", "--resume"} <= set(panels["Run and output"])
    assert {"--workers", "--device", "--scheduler"} <= set(panels["Cluster"])
    listed = {option: title for title, options in panels.items() for option in options}
    for f in dataclasses.fields(RunConfig):
        if f.name != "store":  # the argument
            assert listed[flag(f.name)] == panel_of(f.name), f.name


def test_train_help_shows_defaults_in_one_style():
    result = CliRunner().invoke(app, ["train", "--help"], terminal_width=100)
    # Typer's own "[default: ...]" would be a second style beside the declarations' "[...]".
    assert "[default:" not in result.output
    assert "[20]" in result.output and "[small-cnn]" in result.output
