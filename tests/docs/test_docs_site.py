"""The documentation site as `make docs` builds it: it builds offline with warnings as
errors, every internal link and #anchor of the built HTML resolves, the generated reference
shows what the code has now (every `dane train` option, every `dane bench` command, the
public API), and a headless Chromium renders the index and a search for "train".

The site is built once per module, by sphinx-build in a subprocess (hence `cluster`).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer

from dask_dane.cli import app

pytest.importorskip("sphinx", reason="the docs extra (also in test) builds the site")
pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Page(HTMLParser):
    """A built page's ids (anchors) and the targets of its links and images."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"] or "")
        target = found.get("href") if tag in ("a", "link") else found.get("src")
        if target and tag in ("a", "link", "img"):
            self.targets.append(target)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _text(path: Path) -> str:
    """A page's text, each tag a space (an option and its help are apart), entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built as `make docs` builds it (a fresh read, warnings as errors)."""
    out = tmp_path_factory.mktemp("site") / "html"
    command = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html"]
    done = subprocess.run(
        [*command, str(ROOT / "docs"), str(out)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"sphinx-build failed:\n{done.stdout}\n{done.stderr}"
    return out


def link_problems(root: Path) -> list[str]:
    """Internal links of the built site whose file is missing or whose #anchor it lacks."""
    pages = {p: _parse(p) for p in root.rglob("*.html") if "_sources" not in p.parts}
    problems = []
    for path, page in pages.items():
        for target in page.targets:
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                continue  # http:, mailto:, data:, a protocol-relative URL
            parts = urllib.parse.urlsplit(target)  # a ?v=... query names no file
            file_part, anchor = urllib.parse.unquote(parts.path), parts.fragment
            where = (path.parent / file_part).resolve() if file_part else path
            shown = f"{path.relative_to(root)}: {target}"
            if not where.exists():
                problems.append(f"{shown}: missing file")
            elif anchor and where.suffix == ".html":
                ids = pages[where].ids if where in pages else _parse(where).ids
                if anchor not in ids:
                    problems.append(f"{shown}: missing anchor")
    return problems


def test_every_internal_link_and_anchor_of_the_built_site_resolves(site):
    problems = link_problems(site)
    assert not problems, "broken links in the built site:\n" + "\n".join(problems)
    # The checker saw the site: every part's pages were built.
    for page in ("index", "reference/cli", "reference/api", "howto/gpus", "results/races"):
        assert (site / f"{page}.html").exists(), page


def test_the_link_checker_names_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text('<h1 id="top">A</h1><a href="b.html#top">ok</a>')
    (tmp_path / "b.html").write_text(
        '<p id="top"></p><a href="a.html#gone">x</a><a href="c.html">y</a>'
        '<a href="#top">z</a><a href="https://example.com/#q">w</a><img src="i.png">'
    )
    assert sorted(link_problems(tmp_path)) == [
        "b.html: a.html#gone: missing anchor",
        "b.html: c.html: missing file",
        "b.html: i.png: missing file",
    ]


def _train_options() -> list[str]:
    """Every spelling of every `dane train` setting: those its --help leaves to `dane options`
    too, the hidden former spellings (--momentum) left out, as `dane options` leaves them."""
    from dask_dane.cli.option_list import FORMER

    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="dane")
    train = group.get_command(ctx, "train")
    real = train.real() if hasattr(train, "real") else train
    return [
        spelling
        for param in real.params
        if param.param_type_name == "option" and not (param.name or "").endswith(FORMER)
        for spelling in param.opts
    ]


def test_the_cli_page_holds_every_train_option_and_bench_command(site):
    text = _text(site / "reference" / "cli.html")
    options = _train_options()
    missing = [o for o in options if not re.search(re.escape(o) + r"(?![\w-])", text)]
    assert len(options) > 50 and not missing, f"not on the CLI page: {missing}"
    ids = _parse(site / "reference" / "cli.html").ids
    bench = ["dane-bench-" + name for name in ("scaling", "ddp", "memory", "cli-startup")]
    assert {"dane-train", "dane-prepare", "dane-bench", *bench} <= ids
    # The page's text is the commands' help: no typographic dash where `--` is typed.
    assert "–local-lr" not in text and "--local-lr" in text


def test_the_api_page_documents_the_public_functions(site):
    page = site / "reference" / "api.html"
    ids = _parse(page).ids
    names = ["dask_dane.train", "dask_dane.prepare", "dask_dane.load", "dask_dane.TrainResult"]
    assert set(names) <= ids
    text = _text(page)
    assert text.count("Parameters") >= 3  # numpydoc rendered each function's parameters


def test_the_settings_page_lists_every_toml_key(site):
    from dask_dane.pipeline.setup.config import RunConfig

    text = _text(site / "reference" / "settings.html")
    keys = [name for name in RunConfig.__dataclass_fields__ if name != "resumed"]
    missing = [k for k in keys if k not in text]
    assert not missing, f"keys not on the settings page: {missing}"
    assert "skew-dane" in text and "fashion-mnist-dane-best" in text


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)")
def test_a_browser_renders_the_index_and_a_search_for_train(site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright: the test extra")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto((site / "index.html").as_uri())
            article = page.locator("article").first
            assert "dask-dane" in page.title()
            sidebar = page.locator(".sidebar-tree").first.inner_text().lower()
            assert "how-to guides" in sidebar and "benchmarks" in sidebar
            assert len(article.inner_text()) > 300
            page.goto((site / "search.html").as_uri() + "?q=train")
            # Sphinx's search script fills the list from searchindex.js once it has loaded.
            results = page.locator("#search-results ul.search li")
            results.first.wait_for(timeout=30_000)
            found = results.all_inner_texts()
            assert len(found) >= 3, found
            assert any("Command line" in item for item in found), found
        finally:
            browser.close()
