"""What a user reads states what is true now: no issue numbers in README.md, docs/ or the
presets' comments (history goes in CHANGELOG.md), and the README stays a short door with
the quick start near its top. Pure: reads files, runs nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# "issue 12", "Issue #12", "issues 12 and 25"; not "issue-14" (an old anchor kept for links).
ISSUE = re.compile(r"\bissues?[\s#]+\d+", re.IGNORECASE)  # "#" also starts a wrapped comment
TEXT_SUFFIXES = {".md", ".toml", ".sh", ".json", ".py", ".txt"}


def user_text_files(root: Path) -> list[Path]:
    """README.md, every text file under docs/ (not the built site) and the presets."""
    docs = [
        p
        for p in (root / "docs").rglob("*")
        if p.is_file() and p.suffix in TEXT_SUFFIXES and "_build" not in p.parts
    ]
    presets = [*(root / "presets").rglob("*.toml"), *(root / "presets" / "scripts").glob("*.sh")]
    return [root / "README.md", *sorted(docs), *sorted(presets)]


def issue_mentions(root: Path) -> list[str]:
    """Each mention of an issue number in the user's text, as 'file:line: text'."""
    found = []
    for path in user_text_files(root):
        text = path.read_text(encoding="utf-8")
        for match in ISSUE.finditer(text):  # the whole text: a wrapped line splits "issue\n12"
            number = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(root)}:{number}: {' '.join(match.group(0).split())}")
    return found


def test_no_issue_numbers_in_what_a_user_reads():
    found = issue_mentions(ROOT)
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)
    assert len(user_text_files(ROOT)) > 50  # the walk saw the docs and the presets


def test_the_checker_finds_each_spelling_and_spares_an_old_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "presets").mkdir()
    (tmp_path / "README.md").write_text("see issue 12\n")
    (tmp_path / "docs" / "page.md").write_text("# Page\n(Issue #5) and issues 12 and 25\n")
    (tmp_path / "docs" / "old.md").write_text('<a id="speed-issue-5"></a> an issue tracker\n')
    (tmp_path / "presets" / "p.toml").write_text("# measured in ISSUE\n# 34\nx = 1\n")
    assert issue_mentions(tmp_path) == [
        "README.md:1: issue 12",
        "docs/page.md:2: Issue #5",
        "docs/page.md:2: issues 12",
        "presets/p.toml:1: ISSUE # 34",
    ]


def test_the_readme_is_a_door_with_the_quick_start_near_its_top():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines"
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("```bash"))
    end = next(i for i in range(first + 1, len(lines)) if lines[i].strip() == "```")
    block = [line.split("#")[0].strip() for line in lines[first + 1 : end]]
    assert first < 40 and block == ["make train", "make test"], lines[first:end]


def test_the_changelog_keeps_its_form():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^(##+ .+)$", text, re.MULTILINE)
    assert headings[0] == "## [Unreleased]"
    sections = ["### Added", "### Changed", "### Deprecated", "### Removed", "### Fixed"]
    assert [h for h in headings if h.startswith("### ")][:5] == sections
