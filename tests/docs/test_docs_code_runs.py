"""Every ```python block of README.md and docs/ runs as a reader pastes it: into a script
file in a fresh folder, run with `python script.py`, twice in a row (the second run finds
the store and runs of the first).

A block marked `<!-- fragment: WHY -->` on the line above its fence (a cluster this machine
lacks, a script that takes arguments, an excerpt of the code) is reported as skipped, with
WHY. Blocks marked `<!-- notebook -->` are a page's notebook cells: they run in order as one
notebook, in which `__main__` is no file that worker processes would import again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_checks import python_blocks  # beside it in tests/

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if not p.name.startswith("_")),
]
# As test_api.py runs docs/python.md: exec in a process started with -c, as Jupyter does.
AS_NOTEBOOK = "exec(compile(open('notebook.py').read(), 'notebook', 'exec'))"


def _cases() -> list:
    cases = []
    for page in PAGES:
        shown = str(page.relative_to(ROOT))
        cells = []
        for block in python_blocks(page.read_text()):
            where = f"{shown}:{block.line}"
            if block.marker == "fragment":
                skip = pytest.mark.skip(reason=f"{where} is a fragment: {block.why}")
                cases.append(pytest.param(block.code, False, id=where, marks=skip))
            elif block.marker == "notebook":
                cells.append(block.code)
            else:
                cases.append(pytest.param(block.code, False, id=where))
        if cells:
            cases.append(pytest.param("\n".join(cells), True, id=f"{shown}:notebook"))
    return cases


def _run(code: str, notebook: bool, folder: Path) -> subprocess.CompletedProcess[str]:
    if notebook:
        (folder / "notebook.py").write_text(code)
        command = [sys.executable, "-c", AS_NOTEBOOK]
    else:
        (folder / "script.py").write_text(code)
        command = [sys.executable, "script.py"]
    env = {**os.environ, "DANE_CACHE": str(folder.parent / "cache")}
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("code", "notebook"), _cases())
def test_the_block_runs_as_pasted_twice(tmp_path, code, notebook):
    folder = tmp_path / "fresh"
    folder.mkdir()

    first = _run(code, notebook, folder)
    second = _run(code, notebook, folder)

    assert first.returncode == 0, f"first run:\n{first.stderr[-3000:]}"
    assert second.returncode == 0, f"second run:\n{second.stderr[-3000:]}"


def test_each_fragment_says_why_and_the_readme_block_runs():
    readme = list(python_blocks((ROOT / "README.md").read_text()))
    fragments = [block for page in PAGES for block in python_blocks(page.read_text())]

    assert all(block.why for block in fragments if block.marker == "fragment")
    assert readme and all(block.marker is None for block in readme)
