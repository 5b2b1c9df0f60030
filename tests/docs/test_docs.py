"""README.md and docs/ stay true to the repository and the CLI: every relative link and
#anchor resolves, every `preset:NAME` is shipped, and every `dane ...` line parses against
the real command (click's make_context: nothing runs). No cluster, no subprocess."""

from __future__ import annotations

from pathlib import Path

import doc_checks as checks
import doc_commands as commands
import pytest
import typer
from typer.core import TyperGroup

from dask_dane.cli import app
from dask_dane.pipeline.algorithms import ALGORITHMS
from dask_dane.presets import list_presets

HERE = Path(__file__).resolve().parents[1]  # tests/
ROOT = HERE.parent


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
PRESETS = {p.name for p in list_presets() if p.kind != "script"}


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module")
def dane() -> TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return group


def _command_outcomes(group: TyperGroup, pages: dict[str, str]) -> tuple[list[str], list[str]]:
    """(breaks, skipped) over pages {name: text}, each as 'file:line: dane ARGV: why'."""
    bad, skipped = [], []
    with commands.paths_need_not_exist(group):
        for shown, text in pages.items():
            for line, argv, inline in commands.doc_commands(text):
                outcome = commands.check_line(
                    group, argv, inline=inline, registered=set(ALGORITHMS), page=text
                )
                entry = f"{shown}:{line}: dane {' '.join(argv)}: {outcome.reason}"
                {"bad": bad, "skipped": skipped, "ok": []}[outcome.status].append(entry)
    return bad, skipped


def test_every_relative_link_and_anchor_resolves():
    problems = [p for page in PAGES for p in checks.link_problems(page, page.read_text(), ROOT)]
    assert not problems, "broken links:\n" + "\n".join(map(str, problems))


def test_every_preset_named_is_shipped():
    files = [*PAGES, *sorted((ROOT / "presets").rglob("*.toml"))]
    problems = [p for f in files for p in checks.preset_problems(_shown(f), f.read_text(), PRESETS)]
    assert not problems, "\n".join(map(str, problems))


def test_every_dane_command_line_parses(dane):
    pages = {_shown(page): page.read_text() for page in PAGES}
    bad, skipped = _command_outcomes(dane, pages)
    checked = sum(1 for text in pages.values() for _ in commands.doc_commands(text))
    listing = "\nskipped (a placeholder kept them from parsing):\n" + "\n".join(skipped)
    assert not bad, "command lines the CLI refuses:\n" + "\n".join(bad) + listing
    # The checker must see the docs' commands, and skip few of them.
    assert checked > 100 and len(skipped) * 10 < checked, f"{checked} checked" + listing


def test_the_link_checker_names_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n## Augmentation: `--augment`\n## Same\n## Same\n")
    page = tmp_path / "page.md"
    text = (
        "# Page\n[ok](other.md#augmentation---augment) [ok](other.md#same-1) [ok](#page)\n"
        "[gone](missing.md)\n![gone](img/none.png) `[code](not-a-link.md)`\n"
        "[bad anchor](other.md#augmentation)\n```bash\n# a comment, no heading\n```\n"
        "[bad anchor](#a-comment-no-heading) [web](https://example.com/x)\n"
    )
    found = [str(p) for p in checks.link_problems(page, text, tmp_path)]
    assert found == [
        "page.md:3: link to a missing file: missing.md",
        "page.md:4: link to a missing file: img/none.png",
        "page.md:5: link to a missing anchor: other.md#augmentation",
        "page.md:9: link to a missing anchor: #a-comment-no-heading",
    ]


def test_the_preset_checker_names_an_unknown_preset_and_spares_the_placeholder():
    text = "`--config preset:NAME`\nuse preset:skew-dane, then preset:fashion-mnist-dane-aug\n"
    found = [str(p) for p in checks.preset_problems("page.md", text, PRESETS)]
    assert found == ["page.md:2: no preset named 'fashion-mnist-dane-aug'"]


BROKEN_PAGE = """\
Run `dane train --scheduler` to join a cluster, or `dane trian STORE`.

```bash
dane train data/d.zarr --rounds N --workers 2 \\
    --local-stesp 30 --out runs/d   # a typo in a continued line
S=data/d.zarr; dane train $S --correction shrnk
dane prepare images:<DIR> --shards M --out STORE
dane bench scaling --store S --workers 1,2 --json OUT.json && dane info STORE
dane train --algorithm nope
dane bench ... --json OUT
```
"""


def test_the_command_checker_names_each_break_and_lists_what_it_skipped(dane):
    bad, skipped = _command_outcomes(dane, {"page.md": BROKEN_PAGE})
    where = [(entry.split(": ")[0], entry.rsplit(": ", 1)[-1]) for entry in bad]
    assert [line for line, _ in where] == ["page.md:4", "page.md:6", "page.md:9", "page.md:1"]
    assert "No such option: --local-stesp" in bad[0]
    assert "unknown correction (--correction) 'shrnk'" in bad[1]
    assert "no algorithm named 'nope'" in bad[2]
    assert "No such command 'trian'" in bad[3]
    # --rounds N and --shards M took sample integers, images:<DIR> a string: they parsed.
    # A placeholder command cannot be: listed, not passed.
    assert [entry.split(": ")[0] for entry in skipped] == ["page.md:10"]
