"""`dane bench local-step`'s profiles: one run of each loop under cProfile, compared.

The engine's top functions by own time show where a local step goes (torch's kernels, if the
engine adds little); the same functions' own time in the plain loop's run, subtracted, show
what the engine adds to it, a step at a time: its sampling, its rows' conversion, lending the
flat weights to the module (functional_call). Functions the plain loop calls more often (its
optimizer over many tensors, where the engine's updates one flat vector) come out below zero.
"""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOP = 12
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # dask-dane's own source files
INSTALLED = "site-packages/"  # torch's and other packages' (a venv may sit in the package root)
BENCH = PACKAGE_ROOT + "/bench/"  # the loops' own code: the bench's, not the engine's

# A profile as its own times by function: {file:line(name): (calls, own s, cumulative s)}.
Table = dict[str, tuple[int, float, float]]


def profile_of(loop: Callable[[], Any]) -> Table:
    """One run of `loop` under cProfile."""
    profiler = cProfile.Profile()
    profiler.enable()
    loop()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    return {_where(key): (calls, own, cum) for key, (_, calls, own, cum, _) in stats.items()}


def compared_profiles(
    engine: Callable[[], Any], plain: Callable[[], Any], steps: int, top: int = TOP
) -> dict[str, Any]:
    """The engine's top costs, its time in dask-dane's own functions (their Python and the
    tensor operators inline in them, as the rows' indexing), and its own time a step beyond
    the plain loop's, function by function (`steps`: a run's K)."""
    ours, theirs = profile_of(engine), profile_of(plain)
    total = sum(own for _, own, _ in ours.values())
    own = sum(entry[1] for name, entry in ours.items() if name.startswith("dask_dane:"))
    ranked = sorted(ours.items(), key=lambda item: item[1][1], reverse=True)
    # Functions both loops call as often do the same work (torch's kernels, the module's
    # calls): their difference is the noise between two runs, so they are left out.
    none = (0, 0.0, 0.0)
    names = {n for n in set(ours) | set(theirs) if ours.get(n, none)[0] != theirs.get(n, none)[0]}
    extra = {n: ours.get(n, none)[1] - theirs.get(n, none)[1] for n in names}
    added = sorted(names, key=lambda n: abs(extra[n]), reverse=True)  # all: the JSON's
    return {
        "total_s": total,
        "plain_total_s": sum(own for _, own, _ in theirs.values()),
        "dask_dane_s": own,
        "dask_dane_share": own / total if total else 0.0,
        "top": [
            {"function": name, "calls": calls, "own_s": own_s, "cum_s": cum_s,
             "share": own_s / total if total else 0.0}
            for name, (calls, own_s, cum_s) in ranked[:top]
        ],
        # The engine's own time a step beyond the plain loop's, over every function the two
        # call unequally often: what its machinery costs, net of what it saves.
        "added_ms_per_step": sum(extra.values()) * 1e3 / steps,
        "added": [
            {"function": name, "engine_calls": ours.get(name, none)[0],
             "plain_calls": theirs.get(name, none)[0], "engine_s": ours.get(name, none)[1],
             "plain_s": theirs.get(name, none)[1], "added_ms_per_step": extra[name] * 1e3 / steps}
            for name in added
        ],
    }  # fmt: skip


def _where(key: tuple[str, int, str]) -> str:
    """A profile entry's function as file:line(name): dask_dane:PATH for the package's own
    files (the bench's loops apart, as bench:PATH), else the path below the installed
    packages' root; a built-in as cProfile names it."""
    file, line, name = key
    if file == "~":
        return name
    if INSTALLED in file:
        return f"{file.split(INSTALLED, 1)[1]}:{line}({name})"
    if file.startswith(BENCH):
        return f"bench:{file[len(BENCH) :]}:{line}({name})"
    if file.startswith(PACKAGE_ROOT + "/"):
        return f"dask_dane:{file[len(PACKAGE_ROOT) + 1 :]}:{line}({name})"
    return f"{file}:{line}({name})"
