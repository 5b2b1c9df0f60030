"""What a user most likely meant by a path that is not what the command takes: a store name
one typo away from a store beside it, a run folder where a store goes, a store where a run
folder goes. Each answer is the clause of a one-line error (the problem and the fix).

Local paths only: a remote URL is not listed for near names (a listing can be slow or
costly), and runs are always local folders.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path

from .. import location

# A run folder holds these (pipeline/engine/run/rundir.py); a store never does.
_RUN_MARKS = ("config.toml", "metrics.jsonl", "checkpoints")
# Where a store goes, and where a run folder goes: the commands the messages name.
_TAKE_A_STORE = "dane train, dane info or dane advise"
_TAKE_A_RUN = "`dane evaluate`, `dane export`, `dane report` or `dane watch`"
# What Pillow reads and people keep photos in; a few of each class folder's files are looked at.
_IMAGE_SUFFIXES = frozenset(
    {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
)
_CLASSES_LOOKED_AT, _FILES_LOOKED_AT = 5, 20


def is_store(path: str | os.PathLike) -> bool:
    """True for a local folder holding a zarr group (zarr.json; .zgroup for zarr v2)."""
    folder = Path(path)
    return (folder / "zarr.json").is_file() or (folder / ".zgroup").is_file()


def is_run_folder(path: str | os.PathLike) -> bool:
    """True for a local folder holding what `dane train` writes (and that is not a store)."""
    folder = Path(path)
    return (
        folder.is_dir()
        and not is_store(folder)
        and any((folder / mark).exists() for mark in _RUN_MARKS)
    )


def is_image_tree(path: str | os.PathLike) -> bool:
    """True for a local folder laid out as the `images:DIR` source reads it: class folders
    holding image files (or train/ holding them). A few files a class folder are looked at,
    so a large tree answers as fast as a small one."""
    folder = Path(path)
    root = folder / "train" if (folder / "train").is_dir() else folder
    if not root.is_dir():
        return False
    classes = [entry for entry in sorted(root.iterdir()) if entry.is_dir()]
    return any(_holds_an_image(entry) for entry in classes[:_CLASSES_LOOKED_AT])


def _holds_an_image(folder: Path) -> bool:
    for count, file in enumerate(folder.rglob("*")):
        if file.suffix.lower() in _IMAGE_SUFFIXES:
            return True
        if count >= _FILES_LOOKED_AT:
            return False
    return False


def images_not_store(given: str) -> str:
    """The message for a folder of images given where a store goes: the `dane prepare`
    command that writes a store from it, beside it."""
    out = os.path.normpath(given) + ".zarr"
    return (
        f"{given} is a folder of images, not a store; write a store from it with `dane "
        f"prepare images:{given} --out {out}`, then pass {out} in its place"
    )


def near_store(given: str) -> str | None:
    """A store in the same folder whose name is close to `given`'s (a typo), as the user
    would type it (the folder part kept as given); None where there is none."""
    if location.is_remote(given):
        return None
    folder, name = os.path.split(os.path.normpath(given))
    try:
        entries = os.listdir(folder or ".")
    except OSError:  # the folder itself is missing or unreadable: nothing to offer
        return None
    stores = [entry for entry in entries if is_store(os.path.join(folder or ".", entry))]
    # Compared without the suffix every store shares, which would make any two names near.
    by_stem = {entry.removesuffix(".zarr"): entry for entry in stores}
    match = difflib.get_close_matches(name.removesuffix(".zarr"), by_stem, n=1, cutoff=0.75)
    return os.path.join(folder, by_stem[match[0]]) if match else None


def run_not_store(given: str) -> str:
    """The message for a run folder given where a store goes: the run's own store (from its
    config.toml) and the commands that take each."""
    store = _store_of_run(Path(given))
    uses = f"pass it to {_TAKE_A_RUN}"
    if store is None:
        return (
            f"{given} is a run folder, not a store; {uses}, and give the commands that take a "
            f"store ({_TAKE_A_STORE}) a store (`dane prepare SOURCE --out STORE` writes one)"
        )
    return (
        f"{given} is a run folder, not a store; its store is {store} (from its config.toml): "
        f"train on it with `dane train {store}`, or {uses}"
    )


def store_not_run(given: str | os.PathLike) -> str:
    """The message for a store given where a run folder goes."""
    return (
        f"{given} is a store, not a run folder; pass the folder a run writes "
        f"(`dane train {given} --out RUN`, then RUN here); a store goes to {_TAKE_A_STORE}"
    )


def _store_of_run(run: Path) -> str | None:
    """The store a run's config.toml names ([data] store), None where it names none."""
    try:
        config = tomllib.loads((run / "config.toml").read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    data = config.get("data")
    store = data.get("store") if isinstance(data, dict) else config.get("store")
    return store if isinstance(store, str) and store else None
