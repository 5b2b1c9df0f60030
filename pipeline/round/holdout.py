"""The validation split: a stratified, seeded slice of each training shard's rows held out.

Chosen at train time, not by `dane prepare`, so every existing store trains with it. It is a
pure function of the shard's labels, the fraction, the run's seed and the shard's index, and
load_shard computes it from the rows it has just read: the worker (training), the reference and
the driver's in-process loads therefore remove the same rows, and a caller that reads another
[start, stop) (bench/scaling/introspect.py, the model check) gets a split of those rows, never a
stale list of positions that may lie outside them.
"""

from __future__ import annotations

import numpy as np

PARTS = ("train", "val", "all")


def held_out_rows(y: np.ndarray, fraction: float, *, seed: int, index: int) -> np.ndarray:
    """Positions (sorted, into `y`) of the shard's validation rows.

    round(fraction * n) rows, at most n - 1 so a shard always keeps a row to train on, shared
    out among the classes in proportion to their counts (largest remainders; regression targets
    count as one class), each class's rows drawn at random from `seed` and the shard `index`.
    """
    n = len(y)
    total = min(round(fraction * n), n - 1)
    if fraction <= 0.0 or total <= 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([seed, index, 0x7A1])  # its own stream: no other draw shifts
    classes = np.unique(y) if np.issubdtype(y.dtype, np.integer) else np.zeros(1)
    members = [np.flatnonzero(y == c) for c in classes] if len(classes) > 1 else [np.arange(n)]
    counts = np.array([len(m) for m in members], dtype=np.int64)
    exact = total * counts / n
    quota = np.floor(exact).astype(np.int64)
    # Largest remainders first; ties to the lower class, so the result depends on nothing else.
    order = np.lexsort((np.arange(len(counts)), -(exact - quota)))
    quota[order[: total - int(quota.sum())]] += 1
    picked = [
        rng.choice(m, size=int(k), replace=False) for m, k in zip(members, quota, strict=True)
    ]
    return np.sort(np.concatenate(picked)).astype(np.int64)


def part_positions(
    y: np.ndarray, part: str, fraction: float, *, seed: int, index: int
) -> np.ndarray:
    """Positions (sorted, into `y`) of the rows of `part`: "train" (held-out rows removed),
    "val" (only those rows) or "all" (every row, the split ignored)."""
    if part not in PARTS:
        raise ValueError(f"part is one of {', '.join(PARTS)} (got {part!r})")
    everything = np.arange(len(y), dtype=np.int64)
    if part == "all" or fraction <= 0.0:
        return everything if part != "val" else everything[:0]
    held = held_out_rows(y, fraction, seed=seed, index=index)
    if part == "val":
        return held
    keep = np.ones(len(y), dtype=bool)
    keep[held] = False
    return everything[keep]


def select_part(
    x: np.ndarray, y: np.ndarray, part: str, fraction: float, *, seed: int, index: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of `part` (part_positions), order kept; all rows untouched for "all"."""
    if part == "all" or (fraction <= 0.0 and part != "val"):
        return x, y
    rows = part_positions(y, part, fraction, seed=seed, index=index)
    return x[rows], y[rows]
