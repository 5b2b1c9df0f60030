"""Every ```python block of README.md and docs/ runs as a reader pastes it: into a script
file in a fresh folder, run with `python script.py`, twice in a row (the second run finds
the store and runs of the first).

A block marked `<!-- fragment: WHY -->` on the line above its fence (a cluster this machine
lacks, a script that takes arguments, an excerpt of the code) is reported as skipped, with
WHY. Blocks marked `<!-- notebook -->` are a page's notebook cells: they run in order as one
notebook, in which `__main__` is no file that worker processes would import again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_checks import python_blocks  # beside it in tests/
from doc_runs import PYTHON_PAGE, notebook_code, python_notebook, run_as_pasted

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if not p.name.startswith("_")),
]


def _cases() -> list:
    cases = []
    for page in PAGES:
        shown = str(page.relative_to(ROOT))
        for block in python_blocks(page.read_text()):
            where = f"{shown}:{block.line}"
            if block.marker == "fragment":
                skip = pytest.mark.skip(reason=f"{where} is a fragment: {block.why}")
                cases.append(pytest.param(block.code, False, id=where, marks=skip))
            elif block.marker is None:
                cases.append(pytest.param(block.code, False, id=where))
        if cells := notebook_code(page.read_text()):
            cases.append(pytest.param(cells, True, id=f"{shown}:notebook"))
    return cases


@pytest.mark.parametrize(("code", "notebook"), _cases())
def test_the_block_runs_as_pasted_twice(tmp_path_factory, tmp_path, code, notebook):
    if notebook and code == notebook_code(PYTHON_PAGE.read_text()):
        first, folder = python_notebook(tmp_path_factory)  # test_api.py reads it too
    else:
        folder = tmp_path / "fresh"
        folder.mkdir()
        first = run_as_pasted(code, notebook, folder)

    second = run_as_pasted(code, notebook, folder)

    assert first.returncode == 0, f"first run:\n{first.stderr[-3000:]}"
    assert second.returncode == 0, f"second run:\n{second.stderr[-3000:]}"


def test_each_fragment_says_why_and_the_readme_block_runs():
    readme = list(python_blocks((ROOT / "README.md").read_text()))
    fragments = [block for page in PAGES for block in python_blocks(page.read_text())]

    assert all(block.why for block in fragments if block.marker == "fragment")
    assert readme and all(block.marker is None for block in readme)
