"""Where a run stands between rounds: start or resume it, advance it, save it, sum it up.

The driver (driver.py) and the reference (reference.py) both keep a RunState, start each
round from it (round_start) and advance it with the round's result: the totals are counted
here, the row only writes them down. A checkpoint is a RunState as data (protocol.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from ..plan import RunSetup
from ..protocol import Broadcast, Strategy, state_from_data, state_to_data
from ..round import comm
from ..round.tasks import RoundInput, RoundResult, open_round
from ..round.worker import weights_finite
from .checkpoint import CheckpointWriter, load_checkpoint, remove_partial_writes, save_checkpoint
from .decisions import Selection, selects
from .errors import TrainingDiverged
from .rundir import RunDir


@dataclass
class RunState:
    """What a run carries from one round to the next; a checkpoint holds it (and the config)."""

    round: int
    weights: torch.Tensor
    state: Any  # the strategy's driver state
    shard_states: list[Any] | None = None  # each shard's own state (protocol.py)
    best_accuracy: float = -math.inf  # the best test accuracy seen: reported, never selects
    # Model selection (advance): the best validation score so far (val_accuracy, or -val_loss
    # for regression), its round, the test accuracy at it, and the evaluated rounds since.
    best_score: float = -math.inf
    best_round: int = 0
    test_accuracy_at_best: float | None = None
    since_best: int = 0
    cum_comm_bytes: int = 0
    cum_comm_rounds: int = 0
    cum_images: int = 0  # rows of training data read so far (checkpoints before it: 0)
    # The model's buffers (BatchNorm's running statistics), combined each round; {} if none.
    buffers: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    # Rounds 1..round's rows as metrics.jsonl holds them (read once on resume): the summary's
    # source, not checkpointed (the file is their record).
    rows: list[dict[str, Any]] = dataclasses.field(
        default_factory=list, repr=False, compare=False, metadata={"checkpoint": False}
    )
    # With --checkpoint-every N the driver holds the weights of some rounds only: the round
    # `weights` (and `buffers`, `state`) belong to, and the round of the last checkpoint.
    weights_round: int = dataclasses.field(default=0, metadata={"checkpoint": False})
    saved_round: int = dataclasses.field(default=0, metadata={"checkpoint": False})

    @classmethod
    def fresh(cls, setup: RunSetup) -> RunState:
        """Round 0: the model's weights as built under the run's seed (RunSetup.weights),
        and the strategy's initial states."""
        weights = setup.weights.clone()  # the setup's stay as built (a second fresh start)
        buffers = {name: buffer.clone() for name, buffer in setup.buffers.items()}
        shard_states = [setup.strategy.init_shard_state(weights) for _ in setup.store.shards]
        return cls(
            round=0,
            weights=weights,
            buffers=buffers,
            state=setup.strategy.init_state(weights),
            shard_states=shard_states if any(s is not None for s in shard_states) else None,
        )

    def advance(
        self, result: RoundResult, evaluation: dict[str, float] | None, *, weights: bool = True
    ) -> RunState:
        """Take the next round's result and evaluation (None if it had none); returns the run
        itself, whose totals after it its metrics row writes (metrics.round_row). `weights`
        False: the result's weights, buffers and state were left on the cluster
        (--checkpoint-every)."""
        self.round += 1
        if weights:
            self.weights, self.buffers, self.state = result.weights, result.buffers, result.state
            self.weights_round = self.round
        if result.shard_states is not None:
            self.shard_states = result.shard_states
        self.cum_comm_bytes += result.comm_bytes
        self.cum_comm_rounds += result.comm_phases
        self.cum_images += result.rows
        accuracy = evaluation.get("accuracy") if evaluation else None
        if accuracy is not None and accuracy > self.best_accuracy:
            self.best_accuracy = accuracy
        self._select(evaluation)
        return self

    @property
    def is_best(self) -> bool:
        """Whether the round advanced to last is the one selected so far (_select): its
        validation metric beat every earlier round's, or, without a validation split, it is
        the last evaluated round."""
        return self.best_round == self.round

    def _select(self, evaluation: dict[str, float] | None) -> None:
        """Select this round as the model where its validation score beats every earlier
        round's; without validation rows, every evaluated round (the last one wins):
        decisions.Selection."""
        selected = self.would_select(evaluation)
        now = Selection(best_score=self.best_score, since_best=self.since_best)
        now = now.advance(evaluation)  # decisions.py: the ranks of a segment advance alike
        self.best_score, self.since_best = now.best_score, now.since_best
        if selected:
            self.best_round = self.round
            self.test_accuracy_at_best = (evaluation or {}).get("accuracy")

    def would_select(self, evaluation: dict[str, float] | None) -> bool:
        """Whether a round so evaluated would be selected (best.pt), before advancing."""
        return selects(evaluation, self.best_score)

    def as_data(self) -> dict[str, Any]:
        """The checkpointed fields, the strategy's states as plain dicts: what a checkpoint
        holds."""
        data = {name: getattr(self, name) for name in CHECKPOINTED}
        data["state"] = state_to_data(self.state)
        if self.shard_states is not None:
            data["shard_states"] = [state_to_data(s) for s in self.shard_states]
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any], strategy: Strategy) -> RunState:
        """A RunState from a checkpoint (as_data's fields; extra keys are ignored, missing
        ones, from older checkpoints, take their defaults)."""
        values = {name: data[name] for name in CHECKPOINTED if name in data}
        values["state"] = state_from_data(strategy.state_type, data["state"])
        if values.get("shard_states") is not None:
            shard_type = strategy.shard_state_type
            values["shard_states"] = [state_from_data(shard_type, s) for s in data["shard_states"]]
        values["cum_comm_bytes"] = int(values["cum_comm_bytes"])
        return cls(**values)


# RunState's fields that a checkpoint holds (all but the in-memory rows and rounds).
CHECKPOINTED = [f.name for f in dataclasses.fields(RunState) if f.metadata.get("checkpoint", True)]


def round_start(
    setup: RunSetup, state: RunState, placement: list[str]
) -> tuple[RoundInput, Broadcast | None]:
    """The next round's input, and its opening as phase 0 receives it (None if the strategy
    sends none besides the weights): made by tasks.open_round, as the workers make
    it, so that the Dask run and the reference start a round from the same objects."""
    return open_round(round_input_of(setup, state.round + 1, placement), state)


def round_input_of(setup: RunSetup, index: int, placement: list[str]) -> RoundInput:
    """What round `index` is given besides the weights and state, the same in every task,
    for shards so placed (one worker address a shard): its layout (comm.layout) is the
    all-gather's copies and transport over that placement."""
    config = setup.config
    return RoundInput(
        strategy=setup.strategy,
        spec=setup.spec,
        seed=config.seed,
        index=index,
        layout=comm.layout(placement, transport=config.transport),
        num_shards=setup.store.num_shards,
        threads=config.threads_per_worker,
    )


def open_run(setup: RunSetup, run_dir: RunDir, *, resume: bool) -> RunState:
    """A fresh RunState, or the one saved in the run directory's latest checkpoint: part of
    the run's plan, so nothing is written yet (training.begin_run does, once the run starts).

    ValueError where a new run would overwrite one, the directory cannot be written, or the
    checkpoint does not fit the model as built now.
    """
    run_dir.check_usable(resume=resume)
    if not (resume and run_dir.latest.exists()):
        return RunState.fresh(setup)
    remove_partial_writes(run_dir.latest.parent)  # a checkpoint write cut by a kill
    state = RunState.from_data(load_checkpoint(run_dir.latest), setup.strategy)
    check_same_model(state, setup, run_dir)
    state.weights_round = state.saved_round = state.round
    return state


def check_same_model(state: RunState, setup: RunSetup, run_dir: RunDir) -> None:
    """ValueError on the driver, before any work, when the checkpoint's weights or buffers do
    not fit the model as it is built now (its file edited since the run was saved): the
    model as prepare_run built it, not built again."""
    weights = setup.weights
    saved = {k: tuple(v.shape) for k, v in state.buffers.items()}
    built = {k: tuple(v.shape) for k, v in setup.buffers.items()}
    if state.weights.numel() == weights.numel() and saved == built:
        return
    raise ValueError(
        f"{run_dir.latest} holds {state.weights.numel():,} weights and {len(saved)} buffers, "
        f"but --model {setup.config.model} now builds {weights.numel():,} weights and "
        f"{len(built)} buffers: the model changed since the run was saved; restore it, or "
        "start a new run with another --out"
    )


def save_run(
    run_dir: RunDir,
    state: RunState,
    setup: RunSetup,
    *,
    improved: bool,
    writer: CheckpointWriter | None = None,
) -> None:
    """The latest checkpoint, and the best one too when the round `improved` on it: written
    now, or by `writer` in the background. The payload is taken now either way (the state's
    tensors are replaced by the next round, never changed in place)."""
    assert state.weights_round == state.round, "a checkpoint needs the round's own weights"
    payload = {**state.as_data(), "config": setup.config.as_dict(), "model": model_info(setup)}
    state.saved_round = state.round

    def write() -> None:
        save_checkpoint(run_dir.latest, payload)
        if improved:
            save_checkpoint(run_dir.best, payload)

    writer.submit(write) if writer is not None else write()


def model_info(setup: RunSetup) -> dict[str, Any]:
    """What rebuilding, feeding and naming the trained model needs without its store (load,
    export): the samples' shape and dtype, the classes and their names, the normalisation."""
    store = setup.store
    return {
        "name": setup.config.model,
        "sample_shape": list(store.sample_shape),
        "num_classes": store.num_classes,
        "task": store.task,
        "x_dtype": store.x_dtype,
        "normalization": store.normalization,
        "class_names": list(store.class_names or ()) or None,
    }


def check_finite(result: RoundResult, t: int, run_dir: RunDir, saved: int, finite: bool) -> None:
    """TrainingDiverged naming round t, what is not finite (its train_loss, its weights or both)
    and the last checkpoint, `saved`. `finite`: weights_finite, computed where the weights are."""
    loss = result.metrics.get("train_loss")
    bad_loss = loss is not None and not math.isfinite(loss)
    if finite and not bad_loss:
        return
    # A finite loss leaves the weights; else test them (segments.py's `finite` has the loss).
    bad_weights = not bad_loss or not (weights_finite(result) if result.weights.numel() else finite)
    named = [f"train_loss is {loss}"] * bad_loss + ["the weights are not finite"] * bad_weights
    kept = f"the last good checkpoint (round {saved}) is kept in {run_dir.latest}"
    kept = kept if saved > 0 else "no checkpoint was written, so none is kept"
    raise TrainingDiverged(
        f"training diverged in round {t}: {' and '.join(named)}; {kept}; try a larger --mu or "
        "a smaller --local-lr"
    )
