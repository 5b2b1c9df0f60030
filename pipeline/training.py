"""The training entry: a run planned, started, and its rounds run, in that order, once each.

Plan: the store, model and strategy (setup/run_setup.py, unless the caller made them), where
the run stands (engine/run/run_state.open_run), the cluster (launchers/) and each shard's
worker (setup/shard_memory.place_shards); nothing is written before it is complete. Start:
config.toml, the shards loaded once by tasks pinned to their workers. Rounds: the engine's
driver (engine/run/driver.py) with its round source, the Dask graph (pipelined.py) or
segments in one task per worker (segments.py). Above the engine: the engine receives this
plan and a client, and imports nothing of setup/ or launchers/.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from distributed import Client, span
from distributed.scheduler import KilledWorker

from .engine.plan import RunSetup
from .engine.round import comm
from .engine.round.graph import ShardSet
from .engine.round.shards import load_evaluation, load_shard
from .engine.run import run_state
from .engine.run.bounded import cluster_identity, wait_for
from .engine.run.callbacks import Callbacks
from .engine.run.driver import run_rounds
from .engine.run.errors import TrainingDiverged
from .engine.run.metrics import keep_rounds_up_to, summary
from .engine.run.pipelined import GraphRounds
from .engine.run.run_state import RunState
from .engine.run.rundir import RunDir
from .engine.run.segments import SegmentRounds
from .launchers.cluster import make_client
from .setup.config import RunConfig
from .setup.measured_steps import CHOSEN, choose_steps, with_local_steps
from .setup.round_costs import measure_round_costs
from .setup.run_file import notes_starting, write_run_config
from .setup.run_setup import choose_collective, prepare_run
from .setup.shard_memory import killed_loading, place_shards

__all__ = ["Callbacks", "TrainingDiverged", "train"]


def train(
    config: RunConfig,
    *,
    resume: bool = False,
    callbacks: Callbacks | None = None,
    client: Client | None = None,
    model: Callable[..., torch.nn.Module] | None = None,
    setup: RunSetup | None = None,
) -> dict:
    """Train as configured (or continue a run); returns the summary written to summary.json.

    With `client` given (benchmarks running many trainings) that cluster is used as it is;
    otherwise one is started or connected to as the config says, and closed at the end.
    `model` stands for config.model (dask_dane.train(model=fn)); `setup`: the run's store,
    model and strategy as the caller planned them (the CLI and the API), else made here.
    `callbacks` hear the run's events, its end and its failure included (callbacks.py).
    """
    # Plan: every check before anything is written.
    setup = setup or prepare_run(config, model)  # store, model (built once), strategy
    run_dir = RunDir(Path(config.out))
    callbacks = callbacks or Callbacks()
    # The topmost folder that starting the run creates (if any), to remove if no round is done.
    folders = [*reversed(run_dir.root.parents), run_dir.root]
    created = next((folder for folder in folders if not folder.exists()), None)
    with run_dir.claimed():  # until the run ends: no second run writes here meanwhile
        return _claimed_run(config, setup, run_dir, created, callbacks, client, resume)


def _claimed_run(
    config: RunConfig,
    setup: RunSetup,
    run_dir: RunDir,
    created: Path | None,
    callbacks: Callbacks,
    client: Client | None,
    resume: bool,
) -> dict:
    """The run in its claimed directory: `created`, the topmost folder its start created."""
    state = run_state.open_run(setup, run_dir, resume=resume)
    try:
        if state.round >= config.rounds:  # a finished run resumed: nothing left to run
            begin_run(setup.config, run_dir, state, resume=resume, note=callbacks.on_note)
        else:
            # One span for the run: else the idle cluster opens a new default span each round,
            # and workers keep per-span metrics for good (a leak `dane bench soak` measured).
            with (
                nullcontext(client)
                if client
                else make_client(config, worker_log=run_dir.root / "cluster.log") as active,
                span("dane-train"),
            ):
                setup = _start_and_run(active, setup, run_dir, state, callbacks, resume)
    except BaseException as err:
        callbacks.on_failure(err)
        if created is not None and state.round == 0:  # no scheduler answered, say
            shutil.rmtree(created, ignore_errors=True)
        raise
    result = summary(setup, state)
    run_dir.write_summary(result)
    callbacks.on_end(result)  # after the summary: the run is complete whatever they do
    return result


def _start_and_run(
    active: Client, setup: RunSetup, run_dir: RunDir, state: Any, callbacks: Callbacks, resume: bool
) -> RunSetup:
    """The run's start on its cluster (the collective, the shards placed and loaded, config.toml
    written), then its rounds; returns the setup as it ran (placed, its collective chosen)."""
    info = cluster_identity(active)
    model_bytes = comm.payload_bytes([setup.weights, setup.buffers])
    collective, why = choose_collective(setup.config, model_bytes)

    def announce(held: str) -> None:
        callbacks.on_shards(f"{held}; rounds: {why}")

    placed, placement, note = place_shards(setup, info, announce)
    notes = (note, f"collective {why}")
    if resume:  # the K the run chose as it started: the file says so for the run's life
        notes += notes_starting(run_dir, CHOSEN)
    if setup.config.overhead_share is not None:  # K chosen here, and config.toml says which
        costs = measure_round_costs(active, placed, placement, collective, callbacks.on_note)
        steps, line = choose_steps(placed, costs)
        callbacks.on_note(f"dask-dane: {line}")
        setup, placed = with_local_steps(setup, steps), with_local_steps(placed, steps)
        notes += (line,)
    # Start: config.toml as planned (auto stays auto; a chosen K as if given), the shards loaded.
    begin_run(setup.config, run_dir, state, resume=resume, notes=notes, note=callbacks.on_note)
    setup = replace(placed, config=replace(placed.config, collective=collective))
    data = _load_shards(active, setup, placement)  # a damaged shard raises here
    callbacks.on_start(active.dashboard_link, len(info["workers"]))
    # Rounds: a Dask graph each, or segments of them in one task per worker.
    source = SegmentRounds if collective == "torch" else GraphRounds
    run_rounds(active, setup, run_dir, state, data, callbacks, source)
    return setup


def _load_shards(client: Client, setup: RunSetup, placement: list[str]) -> ShardSet:
    """One load task per shard pinned to its worker in `placement`, and beside each its
    scoring piece (a slice of the test split and the shard's held-out rows: round/scoring.py).

    The futures are held for the run, so each shard stays on its worker; if a worker dies,
    Dask reruns its loads elsewhere (the store is the source of truth). A shard that fails its
    checks (datasets/store/rows.py) raises its ValueError here, before the first round.
    """
    token = uuid.uuid4().hex[:8]

    def load(key: str, worker: str, args: dict, task: Callable = load_shard) -> Any:
        return client.submit(task, key=key, workers=[worker], allow_other_workers=True, **args)

    # Each shard, then its scoring piece (a slice of the test split and that shard's
    # held-out validation rows: round/scoring.py), on its worker.
    pieces = range(setup.store.num_shards)
    shards = [load(f"load_shard-{i}-{token}", placement[i], setup.shard_args(i)) for i in pieces]
    test = [
        load(f"load_test-{i}-{token}", placement[i], setup.piece_args(i), load_evaluation)
        for i in pieces
    ]
    try:
        wait_for(client, [*shards, *test], setup.config.timeout)
    except OSError as err:  # every worker lost at once (bounded.py): not a traceback
        raise ValueError(killed_loading(-1, err)) from None
    for index, future in enumerate([*shards, *test]):  # from num_shards on: the pieces
        if future.status == "error":
            err = future.exception()  # KilledWorker: its nanny restarted it past its memory
            raise ValueError(killed_loading(index, err)) if isinstance(err, KilledWorker) else err
    return ShardSet(token=token, shards=shards, placement=placement, test=test)


def begin_run(
    config: RunConfig,
    run_dir: RunDir,
    state: RunState,
    *,
    resume: bool,
    notes: tuple[str, ...] = (),
    note: Callable[[str], None] = lambda line: None,
) -> None:
    """The run started in its directory: config.toml written with the planned `config`
    (RunSetup.config as prepare_run made it: settings as given, so auto resumes as auto),
    a resume's changes recorded after the round it continues from, and `notes` (what the
    driver decided that no setting says) as comments; the metrics file keeps the rounds the
    state has seen, no more (rows dropped past the checkpoint: a line to `note`), and the
    state holds those rows from now on."""
    resumed_after = state.round if resume else 0
    write_run_config(run_dir, config, resumed_after=resumed_after, notes=notes)
    state.rows, lost = keep_rounds_up_to(run_dir.metrics, state.round)
    if lost:  # rows past the checkpoint (--checkpoint-every, a kill)
        note(
            f"resuming after round {state.round}, the last checkpoint: {lost} round"
            f"{'s' if lost > 1 else ''} recorded after it will be re-run"
        )
