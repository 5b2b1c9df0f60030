"""What tests/docs/test_docs.py checks in README.md and docs/: links and anchors, `preset:` names
and `dane` command lines. Pure functions of a page's text, so a unit test can feed them a broken
snippet and see the break named."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^\s*(```|~~~)")
# A code span: a run of backticks, its text, the same run again (CommonMark; may span lines).
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
# [text](target) and ![alt](target); a target may carry a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
PRESET = re.compile(r"preset:([A-Za-z0-9_.-]*[A-Za-z0-9_])")
# The comment on the line above a ```python fence that says how the block runs (not shown in
# the rendered page): `<!-- fragment: WHY -->` (not run) or `<!-- notebook -->` (a page's
# cells, run in order as one notebook). Unmarked blocks run as pasted into a script.
BLOCK_MARKER = re.compile(r"<!--\s*(fragment|notebook)\b:?\s*(.*?)\s*-->")


@dataclass(frozen=True)
class Problem:
    """One broken thing, at file:line."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def fenced_blocks(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """Each fenced code block as (line of its first content line, its language, its lines)."""
    block: list[str] | None = None
    start, language = 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            if block is None:
                block, start = [], number + 1
                language = line.strip().lstrip("`~").strip().lower()
            else:
                yield start, language, block
                block = None
        elif block is not None:
            block.append(line)


@dataclass(frozen=True)
class PythonBlock:
    """A ```python block: where it starts, its code, and the marker above its fence."""

    line: int
    code: str
    marker: str | None  # "fragment", "notebook" or None (a script as pasted)
    why: str  # a fragment's reason


def python_blocks(text: str) -> Iterator[PythonBlock]:
    """Each ```python block with the BLOCK_MARKER on the last non-blank line above it."""
    lines = text.splitlines()
    for start, language, block in fenced_blocks(text):
        if language != "python":
            continue
        above = next((line.strip() for line in reversed(lines[: start - 2]) if line.strip()), "")
        match = BLOCK_MARKER.fullmatch(above)
        marker, why = (match.group(1), match.group(2)) if match else (None, "")
        yield PythonBlock(start, "\n".join(block) + "\n", marker, why)


def prose(text: str) -> str:
    """The text with fenced blocks blanked (line numbers kept): a `# comment` in a bash block
    is no heading, and a link in one is no link."""
    out, inside = [], False
    for line in text.splitlines():
        fence = bool(FENCE.match(line))
        out.append("" if inside or fence else line)
        if fence:
            inside = not inside
    return "\n".join(out)


def code_spans(text: str) -> Iterator[tuple[int, str]]:
    """Each inline code span of the prose as (line, text with newlines as spaces)."""
    body = prose(text)
    for match in CODE_SPAN.finditer(body):
        yield _line_of(body, match.start()), " ".join(match.group(2).split())


def _without_code_spans(text: str) -> str:
    """The prose with code spans blanked, their newlines kept: `[x](y)` in code is no link."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose(text))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, every character that
    is not a letter, digit, space, '-' or '_' dropped, each space a '-' (no collapsing)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: heading slugs (repeats get -1, -2, ...) and <a id=...>."""
    found: set[str] = set(HTML_ID.findall(text))
    seen: dict[str, int] = {}
    for line in prose(text).splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_problems(path: Path, text: str, root: Path) -> list[Problem]:
    """Relative links whose file is missing or whose #anchor the target page lacks."""
    problems = []
    shown = str(path.relative_to(root))
    body = _without_code_spans(text)
    for match in LINK.finditer(body):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = urllib.parse.unquote(target).partition("#")
        where = (path.parent / file_part).resolve()
        line = _line_of(body, match.start())
        if file_part and not where.exists():
            problems.append(Problem(shown, line, f"link to a missing file: {target}"))
            continue
        if not anchor or (file_part and where.suffix != ".md"):
            continue
        if anchor not in anchors(where.read_text() if file_part else text):
            problems.append(Problem(shown, line, f"link to a missing anchor: {target}"))
    return problems


def preset_problems(shown: str, text: str, names: set[str]) -> list[Problem]:
    """`preset:NAME` mentions whose NAME is no shipped preset (NAME itself, in capitals, is
    the placeholder the docs write)."""
    return [
        Problem(shown, _line_of(text, m.start()), f"no preset named {m.group(1)!r}")
        for m in PRESET.finditer(text)
        if m.group(1) not in names and not m.group(1).isupper()
    ]
