"""Scoring spread over the workers: each shard's worker scores its piece of the test split and
its shard's validation rows, and one task combines the pieces' sums in shard order.

The pieces are fixed by the store (one per training shard: plan.RunSetup.piece_args),
not by where they run, and their sums are added in piece order, so a run's figures do not
depend on its placement, and the single-process reference (which scores the same pieces
the same way) gives them bit for bit.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ....models.registry import ModelSpec
from .shards import ShardData, make_objective


@dataclass(frozen=True)
class Score:
    """A piece's sums: loss, correct predictions and rows, of its test rows and of its
    validation rows (no rows: none held out), and the seconds its scoring took."""

    task: str
    loss_sum: float
    correct: int
    rows: int
    val_loss_sum: float = 0.0
    val_correct: int = 0
    val_rows: int = 0
    seconds: float = 0.0


def score_piece(
    spec: ModelSpec,
    piece: ShardData,
    weights: torch.Tensor,
    buffers: dict[str, torch.Tensor] | None = None,
) -> Score:
    """The sums of `weights` (and buffers) over a piece (shards.load_evaluation's ShardData:
    test rows, carrying validation rows as held_out), in eval mode. A streamed piece keeps
    no chunk afterwards."""
    started = time.perf_counter()
    at = weights.to(piece.x.device)
    loss_sum, correct, rows = make_objective(spec, piece, buffers).evaluate_sums(at)
    held = (0.0, 0, 0)
    if piece.held_out is not None:
        held = make_objective(spec, piece.held_out, buffers).evaluate_sums(at)
        piece.held_out.x.release()
    piece.x.release()
    seconds = time.perf_counter() - started
    return Score(piece.task, loss_sum, correct, rows, *held, seconds=seconds)


# A worker's scores: (piece index, its Score) for each piece it holds.
Scored = list[tuple[int, Score]]


def score_pieces(
    spec: ModelSpec, indices: list[int], pieces: list[ShardData], result: Any
) -> Scored:
    """score_piece() of each of a worker's pieces for a round's weights and buffers (`result`,
    a tasks.RoundResult, which imports this module), one after the other: one task a worker
    (graph.py), or every piece in the reference."""
    weights, buffers = result.weights, result.buffers
    return [
        (i, score_piece(spec, p, weights, buffers)) for i, p in zip(indices, pieces, strict=True)
    ]


def combine_scores(*scored: Scored) -> dict[str, float]:
    """Loss and accuracy over every piece of every worker, their sums added in piece order
    (whichever worker scored them); val_loss and val_accuracy where rows were held out;
    eval_s, the slowest worker's seconds (the workers score side by side)."""
    seconds = max(sum(s.seconds for _, s in group) for group in scored)
    pairs = sorted((pair for group in scored for pair in group), key=lambda pair: pair[0])
    scores = [score for _, score in pairs]
    rows = sum(s.rows for s in scores)
    metrics = {"loss": _total(s.loss_sum for s in scores) / max(rows, 1)}
    classification = scores[0].task == "classification"
    if classification:
        metrics["accuracy"] = sum(s.correct for s in scores) / max(rows, 1)
    val_rows = sum(s.val_rows for s in scores)
    if val_rows:
        metrics["val_loss"] = _total(s.val_loss_sum for s in scores) / val_rows
        if classification:
            metrics["val_accuracy"] = sum(s.val_correct for s in scores) / val_rows
    return {**metrics, "eval_s": seconds}


# A plain left-to-right sum of floats, in the order given: Python 3.12's sum() compensates its
# rounding, so a driver and workers on different Pythons would add differently.
def _total(values: Iterable[float]) -> float:
    return functools.reduce(operator.add, values, 0.0)
