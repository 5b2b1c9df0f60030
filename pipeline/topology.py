"""How a phase's input spreads from the reducing worker to the others: directly, or down a
relay tree. Plain functions of worker counts (no Dask), so that graph.py builds its relays from
them and the benchmarks' network model times the very same plan."""

from __future__ import annotations

# From this many workers on, `auto` sends a phase's input down the relay tree: the root's link
# then carries 3 copies in turn instead of 7. At 4 workers on this 2-core machine the tree's
# saving (2 copies instead of 3) did not show beside the oversubscribed compute (dane bench
# network, docs/results.md), so below 8 `auto` sends directly; `--broadcast tree` forces it.
TREE_FROM_WORKERS = 8


def chains_rounds(broadcast: str) -> bool:
    """Whether rounds run in the all-gather form, chained on the cluster (pipelined.py)."""
    return broadcast == "allgather"


def use_tree(broadcast: str, placement: list[str]) -> bool:
    """Whether a phase's input goes down a relay tree (`auto`: from TREE_FROM_WORKERS on)."""
    workers = len(set(placement))
    return broadcast == "tree" or (broadcast == "auto" and workers >= TREE_FROM_WORKERS)


def fan_out_plan(workers: int, *, tree: bool) -> list[list[tuple[int, int]]]:
    """How a phase input held by worker 0 reaches workers 1..W-1: levels of (from, to) copies,
    a level's copies at once, the levels in turn. Direct: one level, all from worker 0. Tree:
    level l copies from worker k - 2^l to each k in [2^l, 2^(l+1)), doubling the holders.
    _fan_out builds its relays from this plan, and the benchmarks' network model
    (bench/network/model.py) times it, so both describe the same broadcast."""
    if workers < 2:
        return []
    if not tree:
        return [[(0, k) for k in range(1, workers)]]
    levels, width = [], 1
    while width < workers:
        levels.append([(k - width, k) for k in range(width, min(2 * width, workers))])
        width *= 2
    return levels
