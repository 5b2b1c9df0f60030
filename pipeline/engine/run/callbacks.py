"""Callbacks: what a run tells whoever watches it, the engine's only way out to them.

The driver (loop.py, driver.py and its round sources) calls a Callbacks object at the start, after
each round once it is recorded, and at the end or on a failure, so whatever watches a run
(the `dane train` bar, the notebook's lines, TensorBoard and MLflow, a benchmark scoring every
iterate) stays out of the round's own work and the engine imports none of them: the CLI and
the API plug them in (pipeline/observe/). This module imports neither torch nor Dask:
`dask_dane.Callbacks` is cheap to reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Callbacks", "chain"]


def _nothing(*args: Any) -> None:
    """The default of every callback: nothing."""


@dataclass(frozen=True)
class Callbacks:
    """Functions the training loop calls while a run goes; each defaults to doing nothing.

    Pass one as ``dask_dane.train(..., callbacks=Callbacks(on_round=...))``. They run on the
    driver, after the round is written to metrics.jsonl, so a slow callback delays the next
    round's bookkeeping but never changes what is computed.

    Attributes
    ----------
    on_start : Callable[[str, int], None]
        Called once the cluster is up and the shards are loaded, with the dashboard's
        address and the number of workers. Not called when a resumed run has no round left.
    on_round : Callable[[dict], None]
        Called after each round with its metrics row, the dict written to metrics.jsonl:
        ``round``, ``train_loss``, ``test_loss`` and ``test_accuracy`` (None where the round
        was not evaluated), ``wall_s``, ``comm_bytes``, ``is_best`` and the algorithm's own
        figures.
    on_weights : Callable[[int, torch.Tensor], None]
        Called after ``on_round`` with the round number and the new flat parameter vector
        (on the CPU). Do not modify it in place: the run continues from it; clone to keep it.
    on_shards : Callable[[str], None]
        Called once before ``on_start`` with how the workers hold the shards and why:
        ``--shard-memory`` as resolved for the cluster ("auto: stream (shard 3 holds ...)").
    on_timings : Callable[[int, dict], None]
        Called before ``on_round`` with the round number and where the driver's time went
        for it, in seconds: ``scatter_s`` (sending the weights where the chain of rounds
        (re)started, else 0), ``submit_s`` (building and submitting its graph), ``wait_s``
        (waiting for its result) and ``gather_s`` (fetching it). What the benchmarks time.
    on_end : Callable[[dict], None]
        Called once the run has finished and summary.json is written, with that summary
        (also for a resumed run that had no round left).
    on_failure : Callable[[BaseException], None]
        Called when the run stops on an error (a divergence, a lost cluster, Ctrl-C) before
        the error reaches the caller; the rounds recorded so far stay in the run directory.
    on_note : Callable[[str], None]
        Called with a line for the person running it, about something the run decided or
        waits for: rounds after the last checkpoint to be run again on a resume, the local
        steps ``--overhead-share`` chose, a lease on the workers held by another run, a
        frozen worker removed from the cluster. The engine prints nothing itself: ``dane
        train`` and ``dask_dane.train`` show these lines with their progress.
    """

    on_start: Callable[[str, int], None] = _nothing
    on_round: Callable[[dict[str, Any]], None] = _nothing
    on_weights: Callable[[int, torch.Tensor], None] = _nothing
    on_shards: Callable[[str], None] = _nothing
    on_timings: Callable[[int, dict[str, float]], None] = _nothing
    on_end: Callable[[dict[str, Any]], None] = _nothing
    on_failure: Callable[[BaseException], None] = _nothing
    on_note: Callable[[str], None] = _nothing


def chain(*callbacks: Callbacks) -> Callbacks:
    """One Callbacks calling each given one in turn (the progress lines, then the user's)."""

    def in_turn(name: str) -> Callable[..., None]:
        def call(*args: Any) -> None:
            for each in callbacks:
                getattr(each, name)(*args)

        return call

    return Callbacks(**{field.name: in_turn(field.name) for field in fields(Callbacks)})
