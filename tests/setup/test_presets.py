"""Presets by name (`--config preset:NAME`) and `dane presets`: every shipped TOML and script is
listed with its purpose, found from the installed package, and a wrong name is one line."""

from __future__ import annotations

from pathlib import Path

from dask_dane import presets
from dask_dane.bench.common.specs import run_tables
from dask_dane.pipeline.setup.config import read_toml

PRESETS = Path(__file__).resolve().parents[2] / "presets"


def test_every_toml_and_script_under_presets_is_a_preset_with_a_purpose():
    shipped = {p.name: p for p in presets.list_presets()}
    on_disk = {p.stem for p in PRESETS.rglob("*.toml")} | {p.stem for p in PRESETS.rglob("*.sh")}
    assert set(shipped) == on_disk  # nothing shipped that is not listed
    for preset in shipped.values():
        assert preset.purpose and "\n" not in preset.purpose, preset.name
    assert shipped["skew-dane"].kind == "settings"
    assert shipped["skew-race-mnist1d"].kind == "runs"
    assert shipped["gpu-check"].kind == "script"


def test_a_preset_name_reads_the_same_settings_as_its_path():
    path = presets.preset_path("fashion-mnist-dane-fast")
    assert read_toml("preset:fashion-mnist-dane-fast") == read_toml(path)
    tables = run_tables("preset:skew-race-mnist1d", "--config")
    assert tables == run_tables(presets.preset_path("skew-race-mnist1d"), "--config")


def test_dane_presets_lists_them_and_prints_a_path(run_cli, capsys):
    assert run_cli(["presets"]) == 0
    listing = capsys.readouterr().out
    for preset in presets.list_presets():
        assert preset.name in listing
    assert "dane train --config preset:NAME" in listing

    assert run_cli(["presets", "--path", "gpu-check"]) == 0
    assert Path(capsys.readouterr().out.strip()) == presets.SCRIPTS_DIR / "gpu-check.sh"
    assert run_cli(["presets", "--dir"]) == 0
    assert Path(capsys.readouterr().out.strip()) == presets.PRESETS_DIR


def test_a_wrong_preset_name_is_one_line_naming_the_closest(
    run_cli, capfd, assert_one_line_error, tmp_path
):
    out = tmp_path / "run"
    status = run_cli(["train", "--config", "preset:skew-dan", "--out", str(out)])
    assert_one_line_error(status, capfd, ["skew-dan", "did you mean skew-dane", "dane presets"])
    assert not out.exists()


def test_no_preset_fixes_the_output_folder():
    # A preset used twice would be refused (the folder holds a run); each use gets its own
    # folder, or the one --out names.
    for preset in presets.list_presets():
        if preset.kind == "settings":
            assert "out" not in read_toml(f"preset:{preset.name}"), preset.name
