"""How the command line spells things: the local solver's settings share the --local- prefix
(their former flags still parse, hidden), `dane bench` stands apart in `dane --help`, every
help page ends with its documentation page, `dane prepare --help` names every source, and
`dane presets` lists the recommended settings first. Pure: parses, runs nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dask_dane import presets
from dask_dane.cli import app
from dask_dane.cli import options as opt
from dask_dane.datasets.sources import PATH_SOURCES, SOURCES

ROOT = Path(__file__).resolve().parents[2]
RENAMED = {  # field: (its flag now, its former flag)
    "lr_schedule": ("--local-lr-schedule", "--lr-schedule"),
    "lr_warmup": ("--local-lr-warmup", "--lr-warmup"),
    "momentum": ("--local-momentum", "--momentum"),
}
VALUES = {"lr_schedule": "cosine", "lr_warmup": "3", "momentum": "0.5"}


def _command(*words: str):
    """The real click command `dane WORDS...` (a lazy stand-in built), and a context."""
    command = typer.main.get_command(app)
    for word in words:
        ctx = command.context_class(command, info_name=word)
        command = command.get_command(ctx, word)
        command = command.real() if hasattr(command, "real") else command
    return command


def _help(*words: str) -> str:
    result = CliRunner().invoke(app, [*words, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def _parsed(command, argv: list[str]) -> dict:
    return dict(command.make_context(command.name, argv).params)


def test_the_option_list_shows_the_local_prefix_and_hides_the_former_flags():
    listing = CliRunner().invoke(app, ["options"], terminal_width=100).output
    for now, former in RENAMED.values():
        assert re.search(rf"^\s+{now}\b", listing, re.MULTILINE), now
        for text in (listing, _help("train")):
            assert not re.search(rf"^\s+{former}\b", text, re.MULTILINE), former


@pytest.mark.parametrize("field", sorted(RENAMED))
def test_a_former_flag_reads_as_its_field_as_the_new_one_does(field):
    train = _command("train")
    now, former = RENAMED[field]
    by_new = opt.former_spellings_applied(_parsed(train, [now, VALUES[field]]))
    by_former = opt.former_spellings_applied(_parsed(train, [former, VALUES[field]]))
    assert by_new == by_former
    assert by_new[field] is not None and str(by_new[field]) == VALUES[field]
    assert not any(key.endswith(opt.FORMER) for key in by_new)  # none reach the settings
    with pytest.raises(ValueError, match=f"{former} is {now}'s former name: give one"):
        opt.former_spellings_applied(_parsed(train, [now, VALUES[field], former, VALUES[field]]))


@pytest.mark.parametrize("bench", ["single", "ddp"])
def test_the_benchmarks_spell_the_local_momentum_alike(bench):
    text = _help("bench", bench)
    assert re.search(r"^\s+--local-momentum\b", text, re.MULTILINE)
    assert not re.search(r"^\s+--momentum\b", text, re.MULTILINE)
    command = _command("bench", bench)
    params = _parsed(command, ["--store", "s.zarr", "--momentum", "0.5"])
    assert 0.5 in params.values()  # the former flag still parses, into its hidden alias


def test_bench_stands_apart_in_dane_help():
    text = _help()
    commands, benchmarks = text.split("Commands:")[1].split("Benchmarks:")
    assert "bench" not in commands.split()
    assert benchmarks.split()[0] == "bench"


@pytest.mark.parametrize(
    "words", [(), ("prepare",), ("info",), ("train",), ("options",), ("advise",), ("evaluate",),
              ("export",), ("report",), ("presets",), ("watch",), ("bench",), ("bench", "scaling")],
)  # fmt: skip
def test_each_help_page_ends_with_its_documentation_page(words):
    last = " ".join(_help(*words).split())  # click wraps the epilog
    found = re.search(r"Docs: (docs/\S+\.md), and every option in (docs/\S+\.md)\.$", last)
    assert found, last[-200:]
    assert (ROOT / found.group(1)).is_file() and (ROOT / found.group(2)).is_file()


def test_prepare_help_names_every_source():
    text = " ".join(_help("prepare").split())
    missing = [name for name in SOURCES if name not in PATH_SOURCES and name not in text]
    missing += [f"{kind}:" for kind in PATH_SOURCES if f"{kind}:" not in text]
    assert not missing, missing


def test_presets_lists_the_recommended_settings_first(run_cli, capsys):
    shipped = {p.name: p for p in presets.list_presets()}
    assert all(shipped[name].kind == "settings" for name in presets.RECOMMENDED)
    assert run_cli(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "For your case (dane train --config preset:NAME):"
    listed = [line.split()[0] for line in lines[1 : 1 + len(presets.RECOMMENDED)]]
    assert listed == list(presets.RECOMMENDED)
    # A user's words, not a benchmark's: no results page named in the purpose.
    assert all("docs/" not in shipped[name].purpose for name in presets.RECOMMENDED)


def test_a_bad_value_by_the_former_flag_is_named_by_the_new_one(
    run_cli, capfd, assert_one_line_error, tmp_path
):
    # Refused while the settings are checked, before a store is read or a cluster started.
    status = run_cli(["train", "--momentum", "1.0", "--out", str(tmp_path / "run")])
    assert_one_line_error(status, capfd, ["--local-momentum", "must be in [0, 1)"])
    assert not (tmp_path / "run").exists()
