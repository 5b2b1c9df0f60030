"""One name per setting: a --config key, a config.toml key and an API keyword are the flag's
name without the dashes (--local-momentum: local_momentum). A key's former name (the field's,
momentum) still reads with a note, so older run folders resume; a typo is answered with the
closest key. Real `dane train` calls, as a newcomer makes them."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import dask_dane
from dask_dane import presets
from dask_dane.pipeline.algorithms.parts.setting_error import FLAG_NAMES

# The smallest real run: an MLP on the 2-shard digits store, 2 local steps, 1 round.
TINY = ("--model", "mlp", "--local-steps", "2", "--batch-size", "16", "--algorithm", "fedavg")


def _settings_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        # Read as --local-momentum: refused for its value, not as an unknown key.
        ("local_momentum = 1.0\n", ["--local-momentum", "must be in [0, 1) (got 1.0)"]),
        ("[solver]\nlocal_lr_schedule = 3\n", ["key 'local_lr_schedule' must be str, got int"]),
        (
            "rounds = 2\nlocal_momentun = 0.9\n",
            [
                "unknown key 'local_momentun'; did you mean 'local_momentum'?",
                "`dane options` lists them all",
            ],
        ),
        (
            "momentum = 0.5\nlocal_momentum = 0.9\n",
            ["keys 'momentum' and 'local_momentum' both set local_momentum"],
        ),
    ],
    ids=["key-read", "key-typed", "typo", "key-and-former-name"],
)
def test_a_config_file_key_is_the_flag_name(
    run_cli, capfd, assert_one_line_error, tmp_path, text, fragments
):
    out = tmp_path / "run"

    status = run_cli(["train", "--config", str(_settings_file(tmp_path, text)), "--out", str(out)])

    assert_one_line_error(status, capfd, fragments)
    assert not out.exists()


@pytest.mark.cluster
def test_flag_named_keys_train_and_config_toml_is_written_with_them(
    digits_stores, cluster_client, tmp_path, dane_here
):
    run = tmp_path / "run"
    settings = _settings_file(tmp_path, 'local_momentum = 0.5\n[solver]\nlr_schedule = "cosine"\n')
    scheduler = ("--scheduler", cluster_client.scheduler.address)

    done = dane_here(
        "train", str(digits_stores[2]), *TINY, *scheduler, "--rounds", "1",
        "--config", str(settings), "--out", str(run), cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    note = f"{settings}: key 'lr_schedule' is now 'local_lr_schedule'; it was read as that"
    assert note in done.stderr.splitlines()
    solver = tomllib.loads((run / "config.toml").read_text())["solver"]
    assert (solver["local_momentum"], solver["local_lr_schedule"]) == (0.5, "cosine")
    assert not set(solver) & set(FLAG_NAMES)  # no field's own name (momentum) as a key


@pytest.mark.cluster
def test_a_run_folder_with_the_former_keys_resumes_with_a_note(
    digits_stores, cluster_client, tmp_path, dane_here
):
    run, scheduler = tmp_path / "run", ("--scheduler", cluster_client.scheduler.address)
    first = dane_here(
        "train", str(digits_stores[2]), *TINY, *scheduler, "--rounds", "1",
        "--local-momentum", "0.5", "--out", str(run), cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    saved = run / "config.toml"
    saved.write_text(saved.read_text().replace("local_momentum =", "momentum ="))  # as written once

    done = dane_here("train", "--out", str(run), "--resume", "--rounds", "2", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    note = f"{saved}: key 'momentum' is now 'local_momentum'; it was read as that"
    assert done.stderr.splitlines().count(note) == 1  # once, though the file is read twice
    solver = tomllib.loads(saved.read_text())["solver"]
    assert solver["local_momentum"] == 0.5 and "momentum" not in solver


def test_the_api_takes_the_flag_names_and_the_former_names(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"^local_momentum must be in \[0, 1\) \(got 1\.0\)"):
        dask_dane.train(out=tmp_path / "a", local_momentum=1.0, progress=False)
    with pytest.raises(ValueError, match=r"^local_momentum must be in \[0, 1\) \(got 1\.0\)"):
        dask_dane.train(out=tmp_path / "b", momentum=1.0, progress=False)
    assert "keyword 'momentum' is now 'local_momentum'" in capsys.readouterr().err
    with pytest.raises(TypeError, match="'local_momentun'; did you mean 'local_momentum'"):
        dask_dane.train(out=tmp_path / "c", local_momentun=0.9, progress=False)
    with pytest.raises(TypeError, match="'momentun'; did you mean 'local_momentum'"):
        dask_dane.train(out=tmp_path / "d", momentun=0.9, progress=False)


def _keys(table: dict) -> set[str]:
    """Every key of a TOML table, its tables' and its arrays of tables' keys too."""
    keys = set(table)
    for value in table.values():
        for inner in value if isinstance(value, list) else [value]:
            keys |= _keys(inner) if isinstance(inner, dict) else set()
    return keys


def test_the_presets_use_the_flag_names():
    shipped = [p for p in presets.list_presets() if p.kind != "script"]

    former = {p.name: _keys(tomllib.loads(p.path.read_text())) & set(FLAG_NAMES) for p in shipped}

    assert shipped and not any(former.values()), former
