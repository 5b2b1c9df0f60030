"""How a phase's input spreads from the reducing worker to the others: directly, or down a
relay tree. Plain functions of worker counts (no Dask), so that graph.py builds its relays from
them and the benchmarks' network model times the very same plan."""

from __future__ import annotations

import math

# From this many workers on, `auto` sends a phase's input down the relay tree: the root's link
# then carries 3 copies in turn instead of 7. At 4 workers on this 2-core machine the tree's
# saving (2 copies instead of 3) did not show beside the oversubscribed compute (dane bench
# network, docs/results.md), so below 8 `auto` sends directly; `--broadcast tree` forces it.
TREE_FROM_WORKERS = 8


# `auto` picks the all-gather form (pipelined.py) while it costs less than the per-round tree
# on a nominal link of this bandwidth and a task hop of this latency (about what one hop
# between two workers costs here, docs/results/scaling.md). All-gather, per phase: one hop, and
# each worker sends its sums to the W - 1 others over its own link. The tree: the partial sums
# climb ceil(log2 W) levels, the phase's input comes down as many, one copy and one hop a
# level. So the all-gather form wins at 2 and 4 workers for any model, at 8 up to 62 MB of
# weights, at 16 up to 12 MB, at 32 up to 5 MB; beyond, the tree does.
NOMINAL_LINK_BYTES_PER_S = 10e9 / 8
NOMINAL_HOP_S = 0.010


def allgather_pays(workers: int, model_bytes: int) -> bool:
    """Whether one all-gather phase costs no more than a reduce and broadcast down the tree."""
    if workers < 2:
        return True
    copy_s = model_bytes / NOMINAL_LINK_BYTES_PER_S
    levels = math.ceil(math.log2(workers))
    return (workers - 1) * copy_s + NOMINAL_HOP_S <= 2 * levels * (copy_s + NOMINAL_HOP_S)


def chains_rounds(broadcast: str, workers: int, model_bytes: int) -> bool:
    """Whether rounds run in the all-gather form, chained on the cluster (pipelined.py):
    `allgather` always, `auto` where allgather_pays, `direct` and `tree` never."""
    if broadcast == "auto":
        return allgather_pays(workers, model_bytes)
    return broadcast == "allgather"


def use_tree(broadcast: str, placement: list[str]) -> bool:
    """In the per-round form (not chains_rounds): whether a phase's input goes down a relay
    tree (`auto`: from TREE_FROM_WORKERS on)."""
    workers = len(set(placement))
    return broadcast == "tree" or (broadcast == "auto" and workers >= TREE_FROM_WORKERS)


def round_form(broadcast: str, placement: list[str]) -> str:
    """The per-round form's name in the metrics rows (`round_form`): how a phase's input
    spreads; the all-gather form's rows say "allgather"."""
    return "tree" if use_tree(broadcast, placement) else "direct"


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
