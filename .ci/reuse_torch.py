"""Give a fresh venv the torch that .venv already has, and torch's own requirements, as
hard links (copies across file systems): what `pip install TORCH_SPEC` would put there, in a
second instead of half a minute of unpacking and byte-compiling the same wheel again.

    .venv/bin/python .ci/reuse_torch.py TORCH_SPEC TARGET_SITE_PACKAGES

Run by .venv's Python. Exits 1 (linking nothing) where .venv's torch is not the one
TORCH_SPEC pins or the target is another Python version: the caller then pip-installs torch.
Only torch and its requirements are given; the wheel under test brings every other
dependency itself, through pip, from its own metadata.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement


def _key(dist: metadata.Distribution) -> str:
    return dist.metadata["Name"].lower().replace("_", "-")


def closure(name: str) -> list[metadata.Distribution]:
    """`name`'s distribution in this Python and those its requirements need, recursively."""
    found: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = metadata.distribution(todo.pop())
        key = _key(dist)
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            required = Requirement(line)
            if required.marker is None or required.marker.evaluate({"extra": ""}):
                todo.append(required.name)
    return list(found.values())


def link_tree(dist: metadata.Distribution, source: Path, target: Path) -> None:
    """The files of `dist` that lie under `source` (not its scripts in bin/), under `target`."""
    for record in dist.files or []:
        path = Path(dist.locate_file(record)).resolve()
        if not path.is_file() or not path.is_relative_to(source):
            continue
        dest = target / path.relative_to(source)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)


def main(spec: str, target_dir: str) -> int:
    source = Path(sysconfig.get_paths()["purelib"]).resolve()
    target = Path(target_dir).resolve()
    pinned = spec.partition("==")[2]
    have = metadata.version("torch")
    if not pinned or have.split("+")[0] != pinned.split("+")[0]:
        print(f"reuse_torch: .venv has torch {have}, not {spec}", file=sys.stderr)
        return 1
    if source.parent.name != target.parent.name:  # lib/python3.X: the same minor version
        print(f"reuse_torch: {target} is not for {source.parent.name}", file=sys.stderr)
        return 1
    # What the fresh venv has already (pip, setuptools) stays as it is.
    present = {_key(dist) for dist in metadata.distributions(path=[str(target)])}
    for dist in closure("torch"):
        if _key(dist) not in present:
            link_tree(dist, source, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
