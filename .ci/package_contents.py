"""What the wheel and the sdist must (and must not) hold; exits non-zero naming what is wrong.

    python .ci/package_contents.py REPO WHEEL SDIST

The wheel must hold every tracked source file of the package and every file the code opens
(the presets and scripts under presets/); the sdist must hold what a packager needs to build
and test (tests, README, LICENSE, pixi.toml) and no data: no stores, runs or images beyond
the ones README shows.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

DATA_SUFFIXES = (".zarr", ".npz", ".pt", ".png", ".jpg", ".jsonl")


def tracked(repo: Path) -> list[str]:
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True
    )
    return listing.stdout.split()


def wheel_problems(repo: Path, wheel: Path) -> list[str]:
    names = set(zipfile.ZipFile(wheel).namelist())
    package_files = [
        f
        for f in tracked(repo)
        if not f.startswith(("tests/", "docs/", ".ci/"))
        and (f.endswith(".py") or f.startswith("presets/"))
    ]
    problems = [f"wheel lacks {f}" for f in package_files if f"dask_dane/{f}" not in names]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("wheel lacks the LICENSE under .dist-info/licenses")
    problems += [f"wheel holds {n}" for n in names if n.startswith("dask_dane/tests/")]
    problems += [f"wheel holds data {n}" for n in names if n.endswith(DATA_SUFFIXES)]
    return problems


def sdist_problems(repo: Path, sdist: Path) -> list[str]:
    with tarfile.open(sdist) as archive:
        # every member sits under one top folder, NAME-VERSION/
        names = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    needed = [
        "README.md",
        "LICENSE",
        "pixi.toml",
        "pyproject.toml",
        "Makefile",
        "tests/conftest.py",
    ]
    needed += [f for f in tracked(repo) if f.startswith("tests/")]
    problems = [f"sdist lacks {f}" for f in needed if f not in names]
    readme_images = set(re.findall(r"\]\(([^)]+\.png)\)", (repo / "README.md").read_text()))
    for name in names:
        if name.endswith(DATA_SUFFIXES) and name not in readme_images:
            problems.append(f"sdist holds data {name}")
        if name.startswith(("runs/", "bench-out/", ".venv/", "data/")) or ".zarr/" in name:
            problems.append(f"sdist holds {name}")
    return problems


def main(repo: str, wheel: str, sdist: str) -> int:
    problems = wheel_problems(Path(repo), Path(wheel)) + sdist_problems(Path(repo), Path(sdist))
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"contents: {Path(wheel).name} and {Path(sdist).name} hold what they must")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
