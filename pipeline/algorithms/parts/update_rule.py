"""How a DANE round ends: the new weights from the mean of the local solutions.

Legend: w = weights at the start of the round, p = mean_i v_i (the proposal), F = the
global loss. Three rules, one of them per run:
- the server step (server.py; the default is the paper's w' = p), with optional momentum
  and step size;
- `safeguard` (safeguard.py): backtrack along a step whose F rose, optionally adapting mu;
  its state is the driver state, its scalars reach the shards as the round's data, and the
  broadcast of the gradient phase decides once per round what the update carries out;
- `line_search` = N (line_search.py): a third phase tries N step sizes along p - w and
  keeps the best on F.
Which of them combine is stated here, in one place (`__post_init__`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base import Broadcast, LocalOutput, RoundEnd, RoundUpdate
from . import line_search as ls
from . import safeguard as sg
from .checks import count_or_off, one_of, validate
from .hyperparameters import declare, part
from .server import SERVER_PART, ServerStep
from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch

    from ...round.objective import ShardObjective


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
        self, sampled: ShardObjective, weights: torch.Tensor, received: dict[str, torch.Tensor]
    ) -> LocalOutput:
        """The line search's phase on one shard: F_i at every trial step along p - w."""
        losses = ls.losses_along(sampled, weights, received["proposal"], self.line_search)
        return LocalOutput(tensors={}, metrics=losses, rows=self.line_search * sampled.num_samples)

    def update(self, end: RoundEnd) -> RoundUpdate:
        if self.line_search:
            proposal = end.broadcasts[1].tensors["proposal"]
            step, loss = ls.best_step(end.mean.metrics, self.line_search)
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


def proposal_broadcast(mean: LocalOutput) -> Broadcast:
    """After the solves, for the line search: p = mean_i v_i to every shard."""
    return Broadcast(tensors={"proposal": mean.tensors["weights"]})
