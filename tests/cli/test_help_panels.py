"""`dane train --help` lists the options most runs set in panels (Data ... Cluster, issue 35
item 6), each under the panel its declaration implies, in the order a run reaches for them,
every default shown one way; in at most 80 lines, the research knobs left to `dane options`."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.cli.option_list import SHOWN
from dask_dane.pipeline.algorithms.parts.setting_error import flag
from dask_dane.pipeline.setup.config import PANELS, RunConfig, panel_of

# The options a first run sets, by the README and the tutorials: --help must name each.
ESSENTIAL = [
    "--model", "--algorithm", "--rounds", "--local-steps", "--local-lr", "--batch-size",
    "--workers", "--device", "--out", "--resume", "--config",
]  # fmt: skip
# Knobs for research: accepted, listed by `dane options`, not in --help.
RESEARCH = ["--grad-sample-growth", "--server-momentum-delay-epochs", "--local-lr-scaling"]


def _help() -> str:
    result = CliRunner().invoke(app, ["train", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


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


def test_train_help_fits_80_lines_and_names_what_a_run_sets_not_the_research_knobs():
    text = _help()
    listed = {option for options in _panels(text).values() for option in options}

    assert len(text.splitlines()) <= 80  # it was 233 lines at this width
    assert set(ESSENTIAL) <= listed
    assert not listed & set(RESEARCH)
    assert "dane options" in text  # where the others are


def test_train_help_groups_each_option_under_its_panel_in_order():
    panels = _panels(_help())

    titles = [t for t in panels if t in PANELS]
    assert titles == [t for t in PANELS if t in titles]  # the declared order
    assert list(panels)[-1] == "Options" and panels["Options"] == ["--help"]
    assert panels["Local solver"][:2] == ["--local-steps", "--local-epochs"]
    assert panels["Run and output"][:4] == ["--config", "--rounds", "--out", "--resume"]
    assert {"--workers", "--device", "--scheduler"} <= set(panels["Cluster"])
    listed = {option: title for title, options in panels.items() for option in options}
    fields = [name for name in RunConfig.__dataclass_fields__ if name in SHOWN]
    assert len(fields) == len(SHOWN) - 2  # every SHOWN name but train's own two is a field
    for name in fields:
        if name != "store":  # the argument
            assert listed[flag(name)] == panel_of(name), name
    for options in panels.values():  # within a panel, SHOWN's order: the order of use
        names = [o.removeprefix("--").replace("-", "_") for o in options if o != "--help"]
        ranks = [SHOWN.index(n) for n in names if n in SHOWN]
        assert ranks == sorted(ranks), options


def test_train_help_shows_defaults_in_one_style():
    text = _help()
    # Typer's own "[default: ...]" would be a second style beside the declarations' "[...]".
    assert "[default:" not in text
    assert "[20]" in text and "[small-cnn]" in text
