"""How a phase's subtree sums cross the group (`--collective torch`), bit for bit.

Each rank holds the sums of its whole subtrees (worker.run_worker_phase); every rank needs
the tree's root, summed in the reference's pairwise order (aggregate.node_sum). Three forms,
by size, each giving the same bits:

- a flat all-gather (up to GATHER_MAX_BYTES of model a node): every rank's headers and one
  flat tensor of its nodes (flat_sums.py) in one all-gather; each rank completes the tree;
- a reduce-scatter (above it): the headers in one small all-gather, then an all-to-all that
  hands rank r chunk r of every node's flat tensor; rank r sums its chunk over the tree, in
  the tree's order, and sends it to every other rank, which receives it into its place. That moves
  an all-reduce's bytes, not an all-gather's W copies, and gloo's all-to-all moves several
  times its all-gather's bytes a second on loopback (`dane bench collective-crossover`);
- the subtree sums as they are, where their tensors share no floating dtype or a lossy
  transport encodes them (transport.py decodes each node on arrival, before the tree).

The header carries what is not in the flat tensor: the samples, metric sums and accounting
(summed by merge in the same tree order), and this rank's flag for the segment's end.
"""

from __future__ import annotations

from typing import Any

import torch

from . import transport
from .aggregate import Partial, TreeNode, node_sum, tree_root
from .flat_sums import FlatLayout, chunk_bounds, flat_layout, header_of, restored, write_flat
from .group import Group
from .shards import to_device
from .worker import WorkerPhase

# Up to this many bytes of a node's flat tensor, one all-gather of everything beats a header
# all-gather and two all-to-alls on loopback (`dane bench collective-crossover`).
GATHER_MAX_BYTES = 256 * 2**10


def exchange_phase(
    group: Group,
    nodes: dict[TreeNode, Partial],
    *,
    count: int,
    encoding: str,
    flag: bool,
    own_seconds: float,
    tag: str,
) -> tuple[list[WorkerPhase], bool]:
    """What every rank receives of a phase (phase_total's input, the same on every rank):
    every rank's subtree sums, or the tree's root alone; and whether any rank flagged.

    The root's tensors are views of the group's buffer, which the same phase of the next
    round writes again: the phase's end (its mean, tasks.py) is made from them before that."""
    first = next(iter(next(iter(nodes.values())).tensor_sums.values()), None) if nodes else None
    if first is not None and not group.carries(first):  # GPU sums, but no NCCL group here
        nodes, first = to_device(nodes, torch.device("cpu")), first.cpu()
    layout = flat_layout(next(iter(nodes.values()))) if nodes else None
    if layout is None or not transport.is_lossless(encoding):
        gathered = group.allgather((WorkerPhase(nodes=nodes), flag), own_seconds, tag=tag)
        return [phase for phase, _ in gathered], any(raised for _, raised in gathered)
    # The buffers go where the sums are, in the flat form's dtype.
    like = torch.empty(0, dtype=layout.dtype, device=first.device if first is not None else "cpu")
    stage = group.scratch(f"{tag}-stage", len(nodes) * layout.size, like)
    rows = stage.view(len(nodes), layout.size)
    for row, partial in zip(rows, nodes.values(), strict=True):
        write_flat(partial, layout, row)
    headers = {node: header_of(partial) for node, partial in nodes.items()}
    if layout.nbytes <= GATHER_MAX_BYTES:
        return _gathered(group, headers, rows, layout, flag, own_seconds, tag)
    gathered = group.allgather((headers, flag), own_seconds, tag=f"{tag}-headers")
    every = [h for h, _ in gathered]
    root = _reduce_scattered(group, every, rows, layout, count, tag)
    header = node_sum(tree_root(count), {n: h for hs in every for n, h in hs.items()}, count)
    total = restored(header, layout, root)
    return [WorkerPhase(nodes={tree_root(count): total})], any(f for _, f in gathered)


def _gathered(
    group: Group,
    headers: dict[TreeNode, Partial],
    rows: torch.Tensor,
    layout: FlatLayout,
    flag: bool,
    own_seconds: float,
    tag: str,
) -> tuple[list[WorkerPhase], bool]:
    """Every rank's headers and flat rows in one all-gather, each node rebuilt as views of
    the gathered bytes (on a boundary: frames start on one, segments too)."""
    gathered = group.allgather((headers, flag, rows), own_seconds, tag=tag)
    phases = []
    for their_headers, _, their_rows in gathered:
        nodes = {
            node: restored(header, layout, row)
            for (node, header), row in zip(their_headers.items(), their_rows, strict=True)
        }
        phases.append(WorkerPhase(nodes=nodes))
    return phases, any(raised for _, raised, _ in gathered)


def _reduce_scattered(
    group: Group,
    every: list[dict[TreeNode, Any]],
    rows: torch.Tensor,
    layout: FlatLayout,
    count: int,
    tag: str,
) -> torch.Tensor:
    """The tree's root as a flat tensor: this rank's chunk of every node summed in the
    tree's order (an all-to-all), then every rank's summed chunk (sends and receives)."""
    world, rank = group.spec.world, group.rank
    bounds = chunk_bounds(layout.size, world)
    lo, hi = bounds[rank]
    # Rank r's run: chunk r of each of this rank's nodes, in node order (a no-op when this
    # rank holds one node: its row is already in chunk order).
    send = (
        rows.reshape(-1)
        if len(rows) == 1
        else torch.cat([rows[:, a:b].reshape(-1) for a, b in bounds])
    )
    send_counts = [len(rows) * (b - a) for a, b in bounds]
    out_counts = [len(nodes) * (hi - lo) for nodes in every]
    received = group.scratch(f"{tag}-chunks", sum(out_counts), rows)
    group.alltoall(received, send, out_counts, send_counts)
    chunks, at = {}, 0
    for nodes in every:
        for node in nodes:
            chunks[node] = received[at : at + hi - lo]
            at += hi - lo
    # In place: the chunks are this rank's own buffer, and a + b has the same bits however
    # it is stored.
    mine = node_sum(tree_root(count), chunks, count, torch.Tensor.add_)
    # Every rank's summed chunk, to every rank: sent straight from where it was summed and
    # received straight into its place in the root.
    root = group.scratch(f"{tag}-root", layout.size, rows)
    root[lo:hi].copy_(mine)
    peers = [peer for peer in range(world) if peer != rank]
    group.send_and_receive(
        {peer: mine for peer in peers}, {peer: root[slice(*bounds[peer])] for peer in peers}
    )
    return root
