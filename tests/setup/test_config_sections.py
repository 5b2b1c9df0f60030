"""Settings in sections: [solver] and [server] beside [data], [model], [algorithm], [cluster]
and [run]; flat keys and older config.toml files read the same; misplaced or doubled keys are
one-line errors naming both places."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from dask_dane.pipeline.setup.config import SECTIONS, RunConfig, check_settings, read_toml, to_toml
from dask_dane.pipeline.setup.settings import ServerSettings, SolverSettings

SECTIONED = """
[model]
model = "mlp"
[algorithm]
algorithm = "dane"
eta = 0.5
[solver]
local_lr = 0.2
local-steps = 7
[server]
server_lr = 0.5
[run]
rounds = 3
"""
FLAT = 'model = "mlp"\neta = 0.5\nlocal_lr = 0.2\nlocal_steps = 7\nserver_lr = 0.5\nrounds = 3\n'


def _write(tmp_path, text: str, name: str = "run.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_section_tables_and_flat_keys_give_the_same_config(tmp_path):
    sectioned = RunConfig(**read_toml(_write(tmp_path, SECTIONED))).validate()
    flat = RunConfig(**read_toml(_write(tmp_path, FLAT, "flat.toml"))).validate()

    assert sectioned == flat
    assert (sectioned.local_lr, sectioned.local_steps, sectioned.server_lr) == (0.2, 7, 0.5)


def test_each_section_is_a_small_dataclass_of_its_component():
    config = RunConfig(local_lr=0.2, server_lr=0.5, eta=0.5)

    solver, server = config.section("solver"), config.section("server")

    assert isinstance(solver, SolverSettings) and solver.local_lr == 0.2
    assert isinstance(server, ServerSettings) and server.server_lr == 0.5
    assert "eta" in {f.name for f in dataclasses.fields(SECTIONS["algorithm"])}
    assert not hasattr(solver, "eta") and not hasattr(server, "local_lr")
    # Every field of RunConfig is in exactly one section.
    names = [f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(RunConfig))


def test_config_toml_writes_solver_and_server_tables_and_reads_back(tmp_path):
    config = RunConfig(local_lr=0.2, batch_size=16, server_momentum=0.9, eta=0.5, momentum=0.5)

    path = _write(tmp_path, to_toml(config), "config.toml")
    tables = tomllib.loads(path.read_text())

    assert list(tables) == list(SECTIONS)
    assert tables["solver"]["local_lr"] == 0.2 and tables["solver"]["batch_size"] == 16
    assert tables["server"]["server_momentum"] == 0.9 and tables["algorithm"]["eta"] == 0.5
    assert "local_lr" not in tables["algorithm"]
    assert tables["solver"]["local_momentum"] == 0.5 and "momentum" not in tables["solver"]
    assert RunConfig(**read_toml(path)) == config


def test_a_config_toml_written_before_solver_and_server_tables_reads_the_same(tmp_path):
    # As 0.x wrote it: the solver's and the server step's keys under [algorithm].
    older = '[algorithm]\nalgorithm = "dane"\neta = 0.5\nlocal_lr = 0.2\nserver_lr = 0.5\n'

    settings = read_toml(_write(tmp_path, older, "config.toml"))

    assert settings == {"algorithm": "dane", "eta": 0.5, "local_lr": 0.2, "server_lr": 0.5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nlocal_lr = 0.2\n", r"'local_lr' belongs in \[solver\], not \[server\]"),
        ("[solver]\neta = 0.5\n", r"'eta' belongs in \[algorithm\], not \[solver\]"),
        ("[run]\nserver_lr = 0.5\n", r"'server_lr' belongs in \[server\], not \[run\]"),
        (
            "local_lr = 0.1\n[solver]\nlocal_lr = 0.2\n",
            r"'local_lr' is given twice, at the top level and in \[solver\]; keep one",
        ),
        (
            "[algorithm]\nlocal_lr = 0.1\n[solver]\nlocal-lr = 0.2\n",
            r"'local-lr' is given twice, in \[algorithm\] and in \[solver\]",
        ),
        ("local-lr = 0.1\nlocal_lr = 0.2\n", r"'local_lr' is given twice, at the top level;"),
        ("solver = 3\n", r"'solver' must be a table \(\[solver\]\) of settings"),
        (
            "momentum = 0.5\n[solver]\nlocal_momentum = 0.9\n",
            r"keys 'momentum' and 'local_momentum' both set local_momentum; keep 'local_momentum'",
        ),
    ],
    ids=[
        "solver-in-server",
        "algorithm-in-solver",
        "server-in-run",
        "flat-and-table",
        "two-tables",
        "two-spellings",
        "not-a-table",
        "key-and-former-name",
    ],
)
def test_a_misplaced_or_doubled_key_is_one_line_naming_both_places(tmp_path, text, message):
    path = _write(tmp_path, text)

    with pytest.raises(ValueError, match=message) as caught:
        read_toml(path)

    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_keywords_take_section_tables_as_a_file_does():
    assert check_settings({"solver": {"local_lr": 0.2}, "rounds": 3}, "train") == {
        "local_lr": 0.2,
        "rounds": 3,
    }
    with pytest.raises(ValueError, match=r"belongs in \[solver\], not \[server\]"):
        check_settings({"server": {"local_lr": 0.2}}, "train")
