"""What a user reads is stated as fact, not as a lab notebook: no heading carries what was or
was not run ("(checked here)", "(not run here: ...)": it would also leak into the heading's
anchor and the links to it), and no page speaks of the session that measured it. Pure: reads
files, runs nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# "(checked here)", "(run here, ...)", "(not run here: ...)", "(tested here)", "(this session)"
HEADING_NOTE = re.compile(r"\((?:not )?(?:checked|run|tested|measured) here\b|\(this session\)")
SESSION_TALK = re.compile(
    r"\bthis session\b|\bother sessions\b|\bwas lent\b|\bsession's (?:device )?time\b", re.I
)
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_pages(root: Path) -> list[Path]:
    """README.md and every Markdown page under docs/ (not the built site)."""
    pages = [p for p in (root / "docs").rglob("*.md") if "_build" not in p.parts]
    return [root / "README.md", *sorted(pages)]


def lab_notes(root: Path) -> list[str]:
    """Each heading that says what was run, and each line of session talk, as 'file:line: text'."""
    found = []
    for path in markdown_pages(root):
        in_code = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FENCE.match(line):
                in_code = not in_code
                continue
            heading = not in_code and line.startswith("#")
            if (heading and HEADING_NOTE.search(line)) or SESSION_TALK.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_no_heading_says_what_was_run_and_no_page_speaks_of_a_session():
    found = lab_notes(ROOT)
    assert not found, "state it as fact, in one plain line of the section:\n" + "\n".join(found)
    assert len(markdown_pages(ROOT)) > 30  # the walk saw the docs


def test_the_checker_finds_each_kind_and_spares_code_and_plain_facts(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# Tool\n## SLURM (run here, against one node)\n")
    (tmp_path / "docs" / "deploy.md").write_text(
        "## Kubernetes (not run here: no cluster)\n"
        "Not tested: no Kubernetes cluster was available.\n"
        "```bash\n# a comment (checked here)\n```\n"
        "Measured on this session's slower machine.\n"
    )
    assert lab_notes(tmp_path) == [
        "README.md:2: ## SLURM (run here, against one node)",
        "docs/deploy.md:1: ## Kubernetes (not run here: no cluster)",
        "docs/deploy.md:6: Measured on this session's slower machine.",
    ]
