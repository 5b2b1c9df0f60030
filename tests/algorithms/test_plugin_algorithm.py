"""A new algorithm is one file and one registry line, and its hyperparameter is declared once.

tests/plugins/damped_average.py is an algorithm written outside the package with one
hyperparameter (`damping`). Here a throwaway distribution's metadata registers it with one
entry-point line, and the `dane` command line trains it, takes `--damping`, lists it in
`dane options` and refuses a bad value by its declared rule, with nothing else edited. A second
entry point names a module that does not exist: it is reported in one line and left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dask_dane.pipeline.algorithms import PLUGIN_GROUP

PLUGIN = Path(__file__).parents[1] / "plugins" / "damped_average.py"


def _installed_plugin(root: Path) -> Path:
    """A folder that, on PYTHONPATH, is an installed distribution holding the plugin."""
    root.mkdir()
    shutil.copy(PLUGIN, root / PLUGIN.name)
    info = root / "damped_average-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: damped-average\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{PLUGIN_GROUP}]\ndamped-average = damped_average:DampedAverage\n"
        "broken = no_such_module_here:Broken\n"  # a plugin that does not import
    )
    return root


def _dane(*args: str, path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.cluster
def test_a_toy_algorithm_registered_from_outside_trains_through_the_cli(digits_stores, tmp_path):
    path = _installed_plugin(tmp_path / "site")
    run = tmp_path / "run"
    common = ("--algorithm", "damped-average", "--local-steps", "5", "--workers", "2")

    helped = _dane("train", "--help", path=path)
    assert helped.returncode == 0, helped.stderr
    # The broken plugin is one line on stderr, and the rest of the command line works.
    (warning,) = helped.stderr.splitlines()
    assert "broken = no_such_module_here:Broken" in warning and "left out" in warning
    # Its setting is listed with every option (`dane train --help` shows the common ones).
    listed = _dane("options", "--filter", "damping", path=path)
    assert listed.returncode == 0, listed.stderr
    assert "--damping" in listed.stdout and "damped-average" in listed.stdout
    assert "[0.5]" in " ".join(listed.stdout.split()), listed.stdout

    refused = _dane("train", str(digits_stores[2]), *common, "--damping", "0", path=path)
    assert refused.returncode == 2
    assert "--damping" in refused.stderr and "Traceback" not in refused.stderr

    trained = _dane(
        "train", str(digits_stores[2]), *common, "--damping", "0.8", "--rounds", "3",
        "--out", str(run), "--dashboard-address", "127.0.0.1:0", path=path,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    settings = tomllib.loads((run / "config.toml").read_text())["algorithm"]
    assert settings["algorithm"] == "damped-average" and settings["damping"] == 0.8
    rows = [row for row in _rows(run) if "train_loss" in row]
    assert len(rows) == 3
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert rows[-1]["test_accuracy"] > 0.25  # ten classes: chance is 0.1


def _rows(run: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in (run / "metrics.jsonl").open()]


def test_a_setting_declared_twice_is_refused():
    from dataclasses import dataclass

    from dask_dane.pipeline.algorithms.parts.hyperparameters import declare, gather

    @dataclass(frozen=True, kw_only=True)
    class First:
        rate: float = declare(0.1, help="a rate.")

    @dataclass(frozen=True, kw_only=True)
    class Second:
        rate: float = declare(0.1, help="the same rate, restated.")

    assert set(gather([First])) == {"rate"}
    with pytest.raises(TypeError, match="declares the setting 'rate' again"):
        gather([First, Second])


def test_every_setting_has_one_declaration_that_the_run_settings_and_the_cli_show():
    import dataclasses

    from dask_dane.cli.options import run_config_parameters
    from dask_dane.pipeline.algorithms import SETTINGS
    from dask_dane.pipeline.algorithms.parts.hyperparameters import with_default
    from dask_dane.pipeline.setup.config import SECTIONS, RunConfig

    # The algorithm's settings fall in three sections, each setting in exactly one of them.
    generated = [dataclasses.fields(SECTIONS[name]) for name in ("algorithm", "solver", "server")]
    algorithm = {f.name: f for fields in generated for f in fields}
    assert sum(map(len, generated)) == len(algorithm)
    assert set(algorithm) == {"algorithm", *SETTINGS}
    for name, gathered in SETTINGS.items():
        assert algorithm[name].metadata["declaration"] is gathered.declaration
        assert algorithm[name].default == gathered.declaration.default
    helps = {p.name: p.annotation.__metadata__[0].help for p in run_config_parameters()}
    for f in dataclasses.fields(RunConfig):
        declared = f.metadata["declaration"]
        assert declared.help.strip(), f"{f.name} has no help text"
        assert helps[f.name] == with_default(declared.help, f.default)
