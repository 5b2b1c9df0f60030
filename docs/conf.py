"""Sphinx configuration of the dask-dane documentation (`make docs`).

Pages are Markdown read by MyST; the CLI reference is rendered from the Typer app at build
time (_ext/dane_cli.py), so it cannot drift from `dane --help`. Offline: no intersphinx.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "dask-dane"
author = "the dask-dane authors"
copyright = "the dask-dane authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "numpydoc",
    "dane_cli",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# The results folders that hold pages (results/NAME/*.md, indexed by results/NAME.md).
RESULTS_PAGE_FOLDERS = {"cnn-accuracy", "memory", "races", "scaling", "skewed-shards"}
exclude_patterns = [
    "_build",
    "_ext",
    "_static",
    "examples",
    # Kept for the links into it from before the site; it maps old anchors to new pages.
    "results.md",
    # The folders beside the results pages hold their JSON, TOML and figures, not pages;
    # those named in RESULTS_PAGE_FOLDERS hold a results page's study pages too (one a
    # question, indexed by results/NAME.md), and are built.
    *(
        f"results/{folder.name}/**"
        for folder in sorted((HERE / "results").iterdir())
        if folder.is_dir() and folder.name not in RESULTS_PAGE_FOLDERS
    ),
]

# GitHub's anchors ("## Non-iid data" -> #non-iid-data): the pages link to headings that way,
# and tests/docs/test_docs.py checks them with GitHub's rules.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# Links to files outside docs/ (source files, presets) are links into the repository.
myst_url_schemes = ["http", "https", "mailto"]

numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()
autodoc_typehints = "none"  # numpydoc's Parameters section says the types

html_theme = "furo"
html_title = "dask-dane"
html_static_path = ["_static"]
html_css_files = ["dane.css"]
smartquotes = False  # "--local-lr" stays two hyphens, as it is typed
