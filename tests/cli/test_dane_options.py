"""`dane options` lists every `dane train` option under its panel, with its default and help,
and --filter narrows it; the options `dane train --help` leaves out still parse, still run,
and a mistyped one is still answered with the closest flags."""

from __future__ import annotations

import dataclasses
import re

import pytest
from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.pipeline.algorithms.parts.setting_error import flag
from dask_dane.pipeline.setup.config import RunConfig, panel_of


def _listing(*args: str) -> str:
    result = CliRunner().invoke(app, ["options", *args], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def _panels(text: str) -> dict[str, str]:
    """Each listed flag (or STORE) -> the panel it is listed under."""
    found, title = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
        elif title and (option := re.match(r"  (--[a-z0-9-]+|store)\b", line)):
            found[option.group(1)] = title
    return found


def test_options_lists_every_setting_under_its_panel_and_train_s_own_two():
    listed = _panels(_listing())

    fields = [f.name for f in dataclasses.fields(RunConfig)]
    expected = {("store" if n == "store" else flag(n)): panel_of(n) for n in fields}
    assert {k: v for k, v in listed.items() if k in expected} == expected
    assert set(listed) - set(expected) == {"--config", "--resume"}
    assert "--momentum" not in listed  # a former spelling: it parses, it is not an option


def test_options_shows_each_default_and_help_as_help_would():
    text = " ".join(_listing().split())

    assert (
        "--grad-sample-growth <float> DANE: grow the gradient sample by this per round [1]." in text
    )
    assert text.startswith(f"`dane train`: {len(RunConfig.__dataclass_fields__) + 2} options")


@pytest.mark.parametrize(
    ("text", "listed"),
    [
        ("server_momentum", {"--server-momentum", "--server-momentum-delay",
                             "--server-momentum-delay-epochs"}),
        ("NESTEROV", {"--server-nesterov"}),  # in its flag and its help, any case
        ("server step", {"--server-momentum", "--server-lr", "--server-lr-rule",
                         "--server-nesterov", "--server-momentum-delay",
                         "--server-momentum-delay-epochs"}),  # a panel's title: the whole panel
    ],
)  # fmt: skip
def test_filter_lists_the_options_that_hold_the_text(text, listed):
    shown = _listing("--filter", text)

    assert set(_panels(shown)) == listed
    assert f"{len(listed)} of " in shown


def test_a_filter_nothing_matches_is_one_line_naming_the_closest_flag(
    run_cli, capfd, assert_one_line_error
):
    status = run_cli(["options", "--filter", "grad-sample-growht"])
    assert_one_line_error(status, capfd, ["'grad-sample-growht'", "--grad-sample-growth?"])


def test_options_left_out_of_help_still_run(planned, dane_here, tmp_path):
    knobs = {"grad_sample": 64, "grad_sample_growth": 1.5, "lr_scaling": "sqrt"}
    argv = [word for name, value in knobs.items() for word in (flag(name), str(value))]

    done = dane_here("train", *argv, "--out", str(tmp_path / "run"), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert {name: getattr(planned[0], name) for name in knobs} == knobs


@pytest.mark.parametrize(
    ("typed", "closest"),
    [("--grad-sample-growt", "--grad-sample-growth"), ("--local-rate", "--local-lr")],
)
def test_a_mistyped_flag_is_answered_with_the_closest_hidden_or_shown(typed, closest):
    result = CliRunner().invoke(app, ["train", typed, "1"], terminal_width=100)

    assert result.exit_code == 2
    assert f"No such option: {typed}" in result.output and closest in result.output
