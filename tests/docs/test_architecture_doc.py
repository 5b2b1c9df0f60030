"""docs/architecture.md stays true to the tree: every file and folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# A path as the page writes one: segments of lowercase names, ending in .py or in a slash.
PATH = re.compile(r"(?<![\w./-])((?:[a-z_][\w-]*/)+(?:[a-z_]\w*\.py(?!\w))?|[a-z_]\w*\.py(?!\w))")


# Folders of the repository: a folder path is checked when it starts with one (the page also
# writes paths inside a store or a run directory, such as train/x and checkpoints/).
TOP_FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _named_paths(text: str) -> set[str]:
    paths = {match.group(1) for match in PATH.finditer(text)}
    return {p for p in paths if p.endswith(".py") or p.split("/")[0] in TOP_FOLDERS}


def test_every_module_and_folder_the_architecture_page_names_exists():
    named = _named_paths(DOC.read_text())
    assert len(named) > 40, sorted(named)  # the parser sees the page's paths
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_reader_finds_files_and_folders_and_skips_placeholders():
    text = "`pipeline/engine/run/loop.py`, tests/house/test_layout.py, `bench/`, "
    text += "FILE.py:NAME, x.pyc, train/x."
    named = {"pipeline/engine/run/loop.py", "tests/house/test_layout.py", "bench/"}
    assert _named_paths(text) == named


def test_the_code_cites_the_architecture_page_not_an_absent_design_file():
    citing = [
        path.relative_to(ROOT)
        for path in [*ROOT.glob("**/*.py"), ROOT / "README.md"]
        if ".venv" not in path.parts and path.name != Path(__file__).name
        and "DESIGN.md" in path.read_text()
    ]  # fmt: skip
    assert not citing, f"these cite DESIGN.md, which is not in the repository: {citing}"
