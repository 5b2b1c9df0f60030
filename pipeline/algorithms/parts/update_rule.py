"""How a DANE round ends: the new weights from the mean of the local solutions.

Legend: w = weights at the start of the round, p = mean_i v_i (the proposal), F = the
global loss. Three rules, one of them per run:
- the server step (server.py; the default is the paper's w' = p), with optional momentum
  and step size;
- `safeguard` (safeguard.py): backtrack along a step whose F rose, optionally adapting mu;
  its state is the driver state, its scalars reach the shards as the round's data, and the
  broadcast of the gradient phase decides once per round what the update carries out;
- `line_search` = N (below): a third phase tries N step sizes along p - w and
  keeps the best on F.
Which of them combine is stated here, in one place (`__post_init__`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...engine.protocol import LocalOutput, RoundEnd, RoundUpdate, validate
from . import safeguard as sg
from .checks import count_or_off, one_of
from .hyperparameters import declare, part
from .server import SERVER_PART, ServerStep
from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch

    from ...engine.protocol import Objective


@dataclass(frozen=True, kw_only=True)
class UpdateRule:
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)
    safeguard: str = declare(
        "off",
        one_of(*sg.SAFEGUARDS),
        exclusive=True,
        help="DANE: off | backtrack | adaptive-mu (halve rejected steps).",
    )
    line_search: int = declare(
        0,
        count_or_off,
        exclusive=True,
        help="DANE, skewed shards: best of N steps 2, 1, 1/2.. on the loss; 0: off.",
    )

    def __post_init__(self) -> None:
        validate(self)
        guarded = self.safeguard != "off"
        if self.line_search and (guarded or self.server.server_momentum):
            raise SettingError(
                f"{setting('line_search')} chooses the step itself; it does not combine with "
                f"{setting('safeguard')} or {setting('server_momentum')}: pass one of them"
            )
        if not self.server.scales_nothing and (guarded or self.line_search):
            raise SettingError(
                f"{setting('server_lr')} and {setting('server_lr_rule')} scale the averaged step;"
                f" {setting('safeguard')} and {setting('line_search')} choose it: pass one"
            )
        if self.server.server_momentum and guarded:
            raise SettingError(
                f"{setting('server_momentum')} and {setting('safeguard')} do not combine "
                "(momentum would carry a rejected step on); pass one of them"
            )

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases this rule adds after the local solves."""
        return ("local_check",) if self.line_search else ()

    @property
    def state_type(self) -> type | None:
        return sg.SafeguardState if self.safeguard != "off" else self.server.state_type

    def init_state(self, weights: torch.Tensor, mu: float) -> Any:
        import torch

        if self.safeguard == "off":
            return self.server.init_state(weights)
        return sg.SafeguardState(
            anchor=weights.clone(),
            step=torch.zeros_like(weights),
            anchor_loss=math.inf,
            halvings=0,
            mu=mu,
        )

    def round_data(self, state: Any) -> sg.Trial | None:
        """The safeguard's scalars for this round's shards and broadcast (None without it)."""
        return state.trial() if isinstance(state, sg.SafeguardState) else None

    def label_parts(self) -> tuple[list[str], list[str], str]:
        """(before the gradient's, after it, the server's suffix): where DANE's label has them."""
        first = [f"safeguard={self.safeguard}"] if self.safeguard != "off" else []
        last = [f"line-search={self.line_search}"] if self.line_search else []
        return first, last, self.server.label()

    def mu(self, round_data: Any, base_mu: float) -> float:
        """mu of this round's local solves: the safeguard's (adaptive-mu), else the setting."""
        return base_mu if round_data is None else round_data.mu

    def decide(
        self, mean: LocalOutput, round_data: Any, base_mu: float, sent: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], Any]:
        """What the gradient phase's broadcast sends, and the safeguard's decision (None
        without one): a rejected w sends nothing, so the solves it would waste do not run."""
        if round_data is None:
            return sent, None
        decision = sg.decide(
            mode=self.safeguard,
            loss=mean.metrics["train_loss"],
            anchor_loss=round_data.anchor_loss,
            halvings=round_data.halvings,
            mu=round_data.mu,
            base_mu=base_mu,
        )
        return (sent if decision.accept else {}), decision

    def check_losses(
        self, sampled: Objective, weights: torch.Tensor, received: dict[str, torch.Tensor]
    ) -> LocalOutput:
        """The line search's phase on one shard: F_i at w + s (p - w) for every trial step s,
        as round metrics."""
        direction = received["proposal"] - weights
        steps = enumerate(trial_steps(self.line_search))
        losses = {_key(k): sampled.loss(weights + s * direction) for k, s in steps}
        return LocalOutput(tensors={}, metrics=losses, rows=self.line_search * sampled.num_samples)

    def update(self, end: RoundEnd) -> RoundUpdate:
        if self.line_search:
            proposal = end.broadcasts[1].tensors["proposal"]
            step, loss = best_step(end.mean.metrics, self.line_search)
            weights = end.weights + step * (proposal - end.weights)
            metrics = {"line_search_step": step, "line_search_loss": loss}
            return RoundUpdate(weights=weights, state=end.state, metrics=metrics)
        if not isinstance(end.state, sg.SafeguardState):
            return self.server.update(end, end.mean.tensors["weights"])
        decision = end.broadcasts[0].decision
        weights, state = sg.next_weights(
            end.state,
            decision,
            weights=end.weights,
            loss=end.metrics["train_loss"],
            proposal=end.mean.tensors.get("weights"),
        )
        metrics = {"safeguard_rejected": float(not decision.accept), "mu": decision.mu}
        return RoundUpdate(weights=weights, state=state, metrics=metrics)


# The metadata of the field DANE takes its update rule in (built from the settings).
UPDATE_PART = part(UpdateRule)
# The default rule, the paper's step 3: w' = mean_i v_i, which DANE's update returns as it is.
PLAIN_UPDATE = UpdateRule()


# A server-side line search along DANE's averaged step (--line-search N).
#
# Legend: w = weights at the start of the round, p = mean_i v_i (the proposal), d = p - w,
# F = the global loss (the mean of the shards' losses, weighted by shard size).
# Plain DANE takes w' = p = w + 1 * d. On skewed shards d is the average of solves that each
# ran far along their own correction, so a step of 1 can overshoot or fall short by a lot.
# The search tries the N step sizes s = 2, 1, 1/2, ... (N of them) and keeps the one with the
# lowest F(w + s d). Bischoff, Günnemann, Jaggi & Stich (2021) found a global line search to be
# what makes second-order federated methods competitive with FedAvg.
#
# It costs a third phase: p goes to the shards (one broadcast, like the gradient's), each shard
# returns N losses (scalars, not counted as bytes). F is measured on the rows DANE's gradient
# phase reads (--grad-sample, else the whole shard), forward passes only.


def trial_steps(count: int) -> list[float]:
    """The step sizes tried: 2, 1, 1/2, ... (`count` of them)."""
    return [2.0 ** (1 - k) for k in range(count)]


def best_step(mean_metrics: dict[str, float], count: int) -> tuple[float, float]:
    """(s, F(w + s d)) with the lowest averaged loss; the larger step on a tie."""
    losses = [mean_metrics[_key(k)] for k in range(count)]
    k = min(range(count), key=lambda i: (losses[i], i))
    return trial_steps(count)[k], losses[k]


def _key(k: int) -> str:
    return f"line_search_loss_{k}"
