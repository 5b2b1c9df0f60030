"""Running the ```python blocks of README.md and docs/ as a reader pastes them, shared by
tests/docs/test_docs_code_runs.py (every block, twice) and tests/tools/test_api.py (the numbers
docs/python.md's notebook prints). Not a test file: they import it by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_checks import python_blocks  # beside it in tests/

ROOT = Path(__file__).resolve().parents[1]
# As Jupyter runs a cell: exec in a process started with -c, where __main__ is no file that
# worker processes would import again.
AS_NOTEBOOK = "exec(compile(open('notebook.py').read(), 'notebook', 'exec'))"
# The one page whose notebook two test files check: its first run is shared (python_notebook).
PYTHON_PAGE = ROOT / "docs" / "python.md"


def notebook_code(text: str) -> str:
    """A page's notebook cells (`<!-- notebook -->` blocks) in order, as one notebook."""
    return "\n".join(block.code for block in python_blocks(text) if block.marker == "notebook")


def run_as_pasted(code: str, notebook: bool, folder: Path) -> subprocess.CompletedProcess[str]:
    """`code` pasted into notebook.py (run as a notebook runs it) or script.py (`python
    script.py`) in `folder`; its DANE_CACHE beside the folder."""
    if notebook:
        (folder / "notebook.py").write_text(code)
        command = [sys.executable, "-c", AS_NOTEBOOK]
    else:
        (folder / "script.py").write_text(code)
        command = [sys.executable, "script.py"]
    env = {**os.environ, "DANE_CACHE": str(folder.parent / "cache")}
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


_NOTEBOOK_RUNS: dict[Path, tuple[subprocess.CompletedProcess[str], Path]] = {}


def python_notebook(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """docs/python.md's notebook run once a test session in a fresh folder: (the run, the
    folder). Its numbers are test_api.py's to check; test_docs_code_runs.py runs it a second
    time there. One run for both (kept here, the module both import): it trains and exports
    a model, the slowest of the pages' blocks."""
    session = tmp_path_factory.getbasetemp()
    if session not in _NOTEBOOK_RUNS:
        folder = tmp_path_factory.mktemp("python-page") / "fresh"
        folder.mkdir()
        code = notebook_code(PYTHON_PAGE.read_text())
        _NOTEBOOK_RUNS[session] = run_as_pasted(code, True, folder), folder
    return _NOTEBOOK_RUNS[session]
