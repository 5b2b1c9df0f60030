"""The safeguard of DANE on non-convex, heterogeneous shards: backtracking, optionally adaptive mu.

Legend: w_a = the last accepted weights (the anchor), F(w_a) = the global training loss there,
d = the step the last local solves proposed from w_a (mean_i v_i - w_a), k = halvings of d so
far, mu = the proximal strength of the next local solves.

Each DANE round starts with a gradient phase at the current weights w = w_a + d / 2^k, which
also yields the global loss F(w) (the mean of the shards' losses). The safeguard decides from
it, before any local solve runs:
- accept if F(w) <= F(w_a), or if k has reached MAX_HALVINGS (then the shortest step is taken
  anyway, so a run never stalls): the solve phase runs from w, w becomes the new anchor;
- otherwise reject: the solve phase is skipped (it moves no bytes), and the next round
  evaluates w_a + d / 2^(k+1). So every backtrack costs exactly one extra gradient phase,
  which the pipeline counts as a communication round.
With `adaptive-mu`, a rejection also doubles mu (from MU_START if it was 0): a larger
proximal term keeps the next local solves closer to w_a, the cure for the client drift that
makes plain DANE diverge. Each accepted round without a backtrack relaxes mu by
MU_RELAX towards the configured mu, so a run that went through one rough patch does not stay
over-damped (a factor of 0.9 halves the excess in about 7 good rounds).

The decision is made once per round, in DANE's broadcast of the gradient phase, from the
round's `Trial` (the scalars of the `SafeguardState`, handed to the round as its data), and
carried to the update in the broadcast. Everything here is a pure function of data, shared by
the Dask driver and the reference runner through the DANE strategy (algorithms/dane.py), so
both take the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


SAFEGUARDS = ("off", "backtrack", "adaptive-mu")

MAX_HALVINGS = 3  # at most 3 halvings: the shortest step tried is d / 8
MU_START = 0.1  # adaptive-mu: the mu a rejection sets when the configured mu is 0
MU_GROWTH = 2.0
MU_RELAX = 0.9


@dataclass(frozen=True, kw_only=True)
class Trial:
    """What a round's safeguard decides with: F(w_a), k and mu (no tensors: every shard gets it)."""

    anchor_loss: float
    halvings: int
    mu: float


@dataclass(frozen=True, kw_only=True)
class SafeguardState:
    """DANE's driver state under a safeguard: the anchor, the step proposed from it, the trial.

    Losses and mu are Python floats (float64), so they compare exactly across rounds.
    """

    anchor: torch.Tensor  # w_a
    step: torch.Tensor  # d
    anchor_loss: float  # F(w_a)
    halvings: int  # k
    mu: float

    def trial(self) -> Trial:
        return Trial(anchor_loss=self.anchor_loss, halvings=self.halvings, mu=self.mu)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What the safeguard decided after the gradient phase at w = w_a + d / 2^k."""

    accept: bool
    halvings: int  # k for the next round: 0 after an accepted round, k + 1 after a rejection
    mu: float  # mu of the next local solves


def decide(
    *, mode: str, loss: float, anchor_loss: float, halvings: int, mu: float, base_mu: float
) -> Decision:
    """Accept or backtrack, given the global loss at w and at the anchor (see module doc)."""
    assert mode in SAFEGUARDS and mode != "off", mode
    # Once MAX_HALVINGS halvings are spent any F(w) is accepted. `loss <= anchor_loss` is
    # False for NaN: a non-finite loss is backtracked like a higher one.
    if halvings >= MAX_HALVINGS or loss <= anchor_loss:
        relaxed = max(base_mu, MU_RELAX * mu) if halvings == 0 else mu
        return Decision(accept=True, halvings=0, mu=relaxed if mode == "adaptive-mu" else mu)
    grown = MU_GROWTH * mu if mu > 0 else MU_START
    return Decision(accept=False, halvings=halvings + 1, mu=grown if mode == "adaptive-mu" else mu)


def backtracked(halvings: int) -> float:
    """The fraction of the proposed step d taken after `halvings` halvings: 1 / 2^k."""
    return 0.5**halvings


def next_weights(
    state: SafeguardState,
    decision: Decision,
    *,
    weights: torch.Tensor,
    loss: float,
    proposal: torch.Tensor | None,
) -> tuple[torch.Tensor, SafeguardState]:
    """The next round's weights and state after `decision` on w = `weights` with F(w) = `loss`.

    Accepted: w is the new anchor, the local solves' mean (`proposal`) the next candidate.
    Rejected: a shorter step along the same d from the same anchor.
    """
    if decision.accept:
        assert proposal is not None, "an accepted round has local solutions"
        anchor, step, anchor_loss, new_weights = weights, proposal - weights, loss, proposal
    else:
        anchor, step, anchor_loss = state.anchor, state.step, state.anchor_loss
        new_weights = anchor + backtracked(decision.halvings) * step
    state = SafeguardState(
        anchor=anchor,
        step=step,
        anchor_loss=anchor_loss,
        halvings=decision.halvings,
        mu=decision.mu,
    )
    return new_weights, state
