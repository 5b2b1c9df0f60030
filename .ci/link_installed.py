"""Give the wheel check's fresh venv distributions that .venv already holds, as hard links
(copies across file systems) of the files pip unpacked and byte-compiled there: what pip
would install again, in 1-2 s instead of half a minute or more.

    .venv/bin/python .ci/link_installed.py SITE NAME[==X.Y.Z]
        NAME (pip; torch) and its requirements, where .venv holds it at the version pinned
        (else exit 1: the caller installs it);
    .venv/bin/python .ci/link_installed.py SITE --report REPORT.json
        each distribution of a `pip install --dry-run --report` that .venv holds at the same
        version; the rest, and the requested wheel itself, are left to pip.

Run by .venv's Python; SITE is the fresh venv's site-packages. A distribution SITE already
holds (its pip, its setuptools) is left as it is, as is one .venv holds editable. Console
scripts are not linked: theirs would run .venv's Python.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SOURCE = Path(sysconfig.get_paths()["purelib"]).resolve()


def _key(dist: metadata.Distribution) -> str:
    return canonicalize_name(dist.metadata["Name"])


def closure(spec: str) -> list[metadata.Distribution]:
    """NAME[==VERSION] and the distributions its requirements need, recursively; [] where
    .venv holds no NAME, or another version than the one pinned (a local +cpu tag aside)."""
    name, _, pinned = spec.partition("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        return []
    if pinned and have.split("+")[0] != pinned.split("+")[0]:
        return []
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        if _key(dist) in found:
            continue
        found[_key(dist)] = dist
        for line in dist.requires or []:
            required = Requirement(line)
            if required.marker is None or required.marker.evaluate({"extra": ""}):
                todo.append(required.name)
    return list(found.values())


def reported(report: Path) -> list[metadata.Distribution]:
    """The report's distributions that .venv holds, at the version pip chose, not editable;
    the requested ones (the wheel under test) left out."""
    found = []
    for item in json.loads(report.read_text())["install"]:
        if item.get("requested"):
            continue
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
        if dist.version == version and not direct.get("dir_info", {}).get("editable"):
            found.append(dist)
    return found


def link(dist: metadata.Distribution, target: Path) -> None:
    """The files of `dist` under .venv's site-packages (not its scripts), under `target`."""
    for record in dist.files or []:
        path = Path(dist.locate_file(record)).resolve()
        if not path.is_file() or not path.is_relative_to(SOURCE):
            continue
        dest = target / path.relative_to(SOURCE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)


def main(site: str, *what: str) -> int:
    target = Path(site).resolve()
    if SOURCE.parent.name != target.parent.name:  # lib/python3.X: the same minor version
        print(f"link_installed: {target} is not for {SOURCE.parent.name}", file=sys.stderr)
        return 1
    dists = reported(Path(what[1])) if what[0] == "--report" else closure(what[0])
    if not dists:
        print(f"link_installed: .venv holds none of {' '.join(what)}", file=sys.stderr)
        return 1
    present = {_key(dist) for dist in metadata.distributions(path=[str(target)])}
    for dist in dists:
        if _key(dist) not in present:
            link(dist, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
