"""The local optimizer's state kept across rounds (--local-optimizer-state keep), per shard.

By default (--local-optimizer-state reset) every round's K local steps start a fresh optimizer:
SGD's momentum buffer, or Adam's moments, begin at zero, as FedAvg's and DANE's papers state them.
DiLoCo (Douillard et al. 2023) and torchft's LocalSGD keep the inner optimizer's state across
rounds instead, and QSR (Gu et al., ICLR 2024) keeps each worker's own: the momentum that the
last round built up carries on, so the first steps of a round are not spent rebuilding it.

Kept, the state is each shard's own (protocol.py's shard state): it never crosses the
collective, it is checkpointed with the run, a resumed or retried round starts from the state
recorded with its weights, and the reference runner keeps the same list, so a run with it
equals the reference bit for bit. It is one tensor the size of the weights for SGD with
momentum and two for Adam (plus Adam's step count, which its bias correction reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch

LOCAL_STATES = ("reset", "keep")


@dataclass(frozen=True, kw_only=True)
class LocalOptimizerState:
    """One shard's local optimizer state between rounds."""

    momentum: torch.Tensor  # SGD's momentum buffer, or Adam's first moment
    second_moment: torch.Tensor  # Adam's second moment; empty for SGD
    steps: int  # steps taken so far (Adam's bias correction counts them)


def fresh_state(weights: torch.Tensor, optimizer: str) -> LocalOptimizerState:
    """The state before a shard's first step: zeros, as a fresh optimizer starts."""
    import torch

    second = torch.zeros_like(weights) if optimizer == "adam" else weights.new_zeros(0)
    return LocalOptimizerState(momentum=torch.zeros_like(weights), second_moment=second, steps=0)


def load_state(
    opt: torch.optim.Optimizer, v: torch.Tensor, state: LocalOptimizerState, optimizer: str
) -> None:
    """Give `opt` (stepping `v`) the kept state. Before any step there is nothing to give: a
    fresh optimizer starts from zeros itself. Copies, so that the recorded state a retried
    round starts from again is never changed in place by the optimizer."""
    import torch

    if not state.steps:
        return
    if optimizer == "adam":
        opt.state[v] = {
            "step": torch.tensor(float(state.steps)),
            "exp_avg": state.momentum.clone(),
            "exp_avg_sq": state.second_moment.clone(),
        }
    else:
        opt.state[v] = {"momentum_buffer": state.momentum.clone()}


def read_state(
    opt: torch.optim.Optimizer, v: torch.Tensor, before: LocalOptimizerState, taken: int
) -> LocalOptimizerState:
    """The state after this round's `taken` steps (`before` where none was taken)."""
    own = opt.state.get(v)
    if not own or not taken:
        return before
    adam = "exp_avg" in own
    return LocalOptimizerState(
        momentum=(own["exp_avg"] if adam else own["momentum_buffer"]).detach().clone(),
        second_moment=own["exp_avg_sq"].detach().clone() if adam else before.second_moment,
        steps=before.steps + taken,
    )


class KeepsLocalOptimizerState:
    """The shard state of a strategy whose `solver` may keep its optimizer state (dane,
    fedavg, fedprox): the state where --local-optimizer-state keep, none where it resets."""

    solver: object

    @property
    def shard_state_type(self) -> type | None:
        return LocalOptimizerState if getattr(self.solver, "keeps_state", False) else None

    def init_shard_state(self, weights: torch.Tensor) -> LocalOptimizerState | None:
        fresh = getattr(self.solver, "fresh_state", None)  # the exact solvers have none
        return fresh(weights) if fresh is not None else None


def check_kept(local_optimizer_state: str, optimizer: str, momentum: float) -> None:
    """Keeping needs something to keep: SGD without momentum has no state."""
    if local_optimizer_state == "keep" and optimizer == "sgd" and not momentum:
        raise SettingError(
            f"{setting('local_optimizer_state', 'keep')} keeps SGD's momentum, which is 0 "
            f"here; set {setting('momentum')} above 0 (0.9) or drop "
            f"{setting('local_optimizer_state')}"
        )


def refuse_kept_state(solver: object, algorithm: str) -> None:
    """An algorithm with shard state of its own (or none of the K steps) does not keep it."""
    if getattr(solver, "local_optimizer_state", "reset") == "keep":
        raise SettingError(
            f"{setting('local_optimizer_state', 'keep')} applies to dane, fedavg and fedprox; "
            f"{setting('algorithm', algorithm)} restarts its local optimizer each round: drop "
            f"{setting('local_optimizer_state')}"
        )
