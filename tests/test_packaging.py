"""The package as pyproject.toml declares it: every folder of Python code is a listed package
and every file the code opens is package data, so that the wheel holds what the checkout
holds (.ci/wheel_check.sh then installs the wheel and runs it from outside the checkout)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP = {"tests", ".venv", ".git", ".pixi", "build", "bench-out", "docs", ".ci"}


DATA = PYPROJECT["tool"]["setuptools"]["package-data"]


def test_every_folder_of_python_code_or_data_is_a_listed_package():
    found = set()
    for init in ROOT.rglob("__init__.py"):
        parts = init.parent.relative_to(ROOT).parts
        if not SKIP & set(parts):
            found.add(".".join(["dask_dane", *parts]))
    # Folders of data only (presets, scripts) are listed too, each with its package-data.
    folders = [p for p in (ROOT / "bench").iterdir() if p.is_dir() and p.name != "__pycache__"]
    data_only = {f"dask_dane.bench.{p.name}" for p in folders if not (p / "__init__.py").exists()}
    assert data_only == {"dask_dane.bench.presets", "dask_dane.bench.scripts"}
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == found | data_only
    assert set(DATA) == data_only


def test_every_non_python_file_of_the_package_is_package_data():
    shipped = [p for p in (ROOT / "bench").rglob("*") if p.is_file() and p.suffix != ".py"]
    shipped = [p for p in shipped if "__pycache__" not in p.parts]
    assert shipped, "bench/ holds no presets: is the test looking in the right place?"
    for path in shipped:
        package = ".".join(["dask_dane", *path.parent.relative_to(ROOT).parts])
        patterns = DATA.get(package, [])
        assert any(fnmatch(path.name, pattern) for pattern in patterns), path


def test_the_license_is_an_spdx_expression_with_its_file():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
