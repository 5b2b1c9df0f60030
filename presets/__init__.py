"""Presets: the measured settings shipped inside the package, addressed as `preset:NAME`.

Every `--config` path of the CLI, and the TOML readers behind them, accept
`preset:NAME` for the file presets/NAME.toml of the installed package, so a user who
installed the wheel runs README's measured settings without a checkout. The files are package
data (pyproject.toml) of this package, found through importlib.resources rather than relative
to the working folder or to another package.

The presets are a package of their own, below every layer that reads them (the CLI, bench/
and the pipeline's config reader): each reader imports downward, and a user looking for the
shipped settings finds them at the package's top level.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

PREFIX = "preset:"
# The settings to start from, one for each case a user chooses, in passes over a shard and
# fractions of its rows, so that each fits any store; `dane presets` lists them first. The
# others (replays/) are the benchmarks' settings and grids, kept under their old names to
# reproduce the measured pages: their sizes are those of the stores they were measured on.
RECOMMENDED = (
    "iid-shards",
    "many-workers",
    "skewed-shards",
    "slow-links",
    "highest-accuracy",
)
# This package holds the use cases' TOMLs; replays/ the benchmarks' and scripts/ the shell
# scripts that drive whole grids. A wheel installs as files, so the resources are paths the
# CLI can print and bash can run.
PRESETS_DIR = Path(str(files(__name__)))
REPLAYS_DIR = Path(str(files(__name__).joinpath("replays")))
SCRIPTS_DIR = Path(str(files(__name__).joinpath("scripts")))


@dataclass(frozen=True)
class Preset:
    name: str
    path: Path
    kind: str  # "settings" (dane train --config), "runs" ([[run]] tables), or "script"
    purpose: str  # the first sentence of the file's leading comment


def _purpose(path: Path) -> str:
    """The file's leading comment up to its first full stop or colon, as one line."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("#!"):
            continue
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    text = " ".join(w for w in words if w)
    for stop in (". ", ": "):
        text = text.split(stop, 1)[0]
    return text.rstrip(".:")


def _kind(path: Path) -> str:
    if path.suffix == ".sh":
        return "script"
    tables = any(line.startswith("[[run]]") for line in path.read_text().splitlines())
    return "runs" if tables else "settings"


def _stem(path: Path) -> str:
    return path.stem


def list_presets() -> list[Preset]:
    """Every shipped preset and script, by name (the file name without its suffix)."""
    tomls = sorted([*PRESETS_DIR.glob("*.toml"), *REPLAYS_DIR.glob("*.toml")], key=_stem)
    paths = tomls + sorted(SCRIPTS_DIR.glob("*.sh"))
    return [Preset(p.stem, p, _kind(p), _purpose(p)) for p in paths]


def preset_path(name: str) -> Path:
    """The file of preset or script `name`; ValueError naming the closest names otherwise."""
    found = {p.name: p.path for p in list_presets()}
    if name in found:
        return found[name]
    close = difflib.get_close_matches(name, found, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise ValueError(f"no preset named {name!r}{hint}; `dane presets` lists them")


def resolve(path: str | Path) -> Path:
    """`preset:NAME` as the shipped file's path; any other path as it is."""
    text = str(path)
    if text.startswith(PREFIX):
        return preset_path(text[len(PREFIX) :])
    return Path(path)
