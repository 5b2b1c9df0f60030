"""The package as pyproject.toml declares it: every folder of Python code is a listed package
and every file the code opens is package data, so that the wheel holds what the checkout
holds (.ci/wheel_check.sh then installs the wheel and runs it from outside the checkout)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Not the package: tests, docs, tools' folders, and what the quick start writes in the clone
# (runs/, data/: ignored by git, never shipped; CI runs `make train` before the suite).
SKIP = {"tests", ".venv", ".git", ".pixi", "build", "bench-out", "docs", ".ci", "runs", "data"}


DATA = PYPROJECT["tool"]["setuptools"]["package-data"]


def _package_folders() -> list[Path]:
    """Every folder under the root that is part of the package (not tests, docs, caches)."""
    return [
        p
        for p in ROOT.rglob("*")
        if p.is_dir() and not (SKIP | {"__pycache__"}) & set(p.relative_to(ROOT).parts)
        and not any(part.startswith(".") or part.endswith(".egg-info")
                    for part in p.relative_to(ROOT).parts)
    ]  # fmt: skip


def _dotted(folder: Path) -> str:
    return ".".join(["dask_dane", *folder.relative_to(ROOT).parts])


def test_every_folder_of_python_code_or_data_is_a_listed_package():
    found = {"dask_dane"} | {_dotted(p) for p in _package_folders() if (p / "__init__.py").exists()}
    # Folders of data only (the replays, the scripts) are listed too, each with its
    # package-data.
    data_only = {_dotted(p) for p in _package_folders() if not (p / "__init__.py").exists()}
    assert data_only == {"dask_dane.presets.replays", "dask_dane.presets.scripts"}
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == found | data_only
    assert set(DATA) == {
        "dask_dane.presets",
        "dask_dane.presets.replays",
        "dask_dane.presets.scripts",
    }


def test_every_non_python_file_of_the_package_is_package_data():
    shipped = [
        p for folder in _package_folders() for p in folder.iterdir()
        if p.is_file() and p.suffix not in (".py", ".pyc")
    ]  # fmt: skip
    assert len(shipped) > 20, "no presets found: is the test looking in the right place?"
    for path in shipped:
        patterns = DATA.get(_dotted(path.parent), [])
        assert any(fnmatch(path.name, pattern) for pattern in patterns), path


def test_the_license_is_an_spdx_expression_with_its_file():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
