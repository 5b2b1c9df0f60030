"""The server's step on the averaged update: momentum (--server-momentum), Nesterov's form of
it (--server-nesterov) and a step size (--server-lr).

Legend: w = weights at the start of the round, w_avg = the round's proposal (the mean of the
local solutions), s = the step size, D = s (w_avg - w) the averaged step, m = the momentum of
the averaged steps, beta = --server-momentum.
    heavy ball:  m' = beta * m + D;    w' = w + m'
    Nesterov:    m' = beta * m + D;    w' = w + D + beta * m'
With beta = 0 both are the plain step w + D (the average itself at s = 1). With alpha = 1 the
heavy ball is SlowMo's outer momentum (Wang, Tantia, Ballas & Rabbat, ICLR 2020).
--server-momentum-delay R holds beta at 0 for rounds 1..R (m still gathers the steps): the
momentum starts once the local updates settle, as SlowMo's authors start it after warm-up. These are
torch.optim.SGD's two forms applied to the outer gradient w - w_avg with lr s (so D = -s g):
FedAvg with the heavy ball is FedAvgM (Hsu, Qi & Brown 2019); with Nesterov, s = 0.7 and
beta = 0.9 it is DiLoCo's outer step (Douillard et al. 2023; OpenDiLoCo's settings). m is the
driver state, checkpointed with the run; the step acts on the weights, never on buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ...engine.protocol import RoundEnd, RoundUpdate, validate
from .checks import momentum_range, non_negative, one_of, optional, positive
from .hyperparameters import declare, part
from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class MomentumState:
    velocity: torch.Tensor  # m


def momentum_step(
    beta: float,
    state: MomentumState | None,
    weights: torch.Tensor,
    proposal: torch.Tensor,
    nesterov: bool = False,
) -> tuple[torch.Tensor, MomentumState | None]:
    """The new weights and state: the proposal itself without momentum (state None); with
    beta = 0 (a delayed momentum's first rounds) the proposal too, bit for bit."""
    if state is None:
        return proposal, None
    if not beta:
        return proposal, MomentumState(velocity=proposal - weights)
    step = proposal - weights
    velocity = beta * state.velocity + step
    moved = step + beta * velocity if nesterov else velocity
    return weights + moved, MomentumState(velocity=velocity)


# A server step size on the averaged update (--server-lr, --server-lr-rule):
#     w' = w + s * (w_avg - w)
# fixed: s = --server-lr (1: the plain average; above 1 extrapolates). fedexp: FedExP's
# adaptive s (Jhunjhunwala, Wang & Joshi, ICLR 2023) from the spread of the local updates
# Delta_i = v_i - w, weighted like the average:
#     s = max(1, mean_i ||Delta_i||^2 / (2 (||mean_i Delta_i||^2 + eps)))
# Local updates that agree (little spread) get s = 1; updates that cancel in the average, as
# noise does, get a longer step along what they share. With momentum, s scales the averaged
# step before the momentum adds it (m' = beta m + s (w_avg - w)).
SERVER_LR_RULES = ("fixed", "fedexp")
UPDATE_SQUARED = "update_sq"  # a shard's ||v_i - w||^2, in its metrics: FedExP's numerator
FEDEXP_EPSILON = 1e-3  # the paper's eps, which bounds s where the average is ~0


@dataclass(frozen=True, kw_only=True)
class ServerStep:
    """The server's step on the averaged update, one part that the local methods (dane,
    fedavg, fedprox, feddyn, scaffold) take (SERVER_PART); its default is the plain average,
    w' = mean_i v_i."""

    SECTION: ClassVar[str] = "server"  # its settings' section ([server], and its --help panel)

    server_momentum: float = declare(
        0.0, momentum_range, help="Local methods: momentum on the averaged step (SlowMo's beta)."
    )
    server_lr: float = declare(
        1.0,
        positive,
        exclusive=True,
        help="Local methods: step s on the averaged update, w + s (mean v - w).",
    )
    server_lr_rule: str = declare(
        "fixed",
        one_of(*SERVER_LR_RULES),
        exclusive=True,
        help="fixed (s = --server-lr) | fedexp (s from the local updates' spread).",
    )
    server_nesterov: bool = declare(
        False,
        exclusive=True,
        help="Local methods: Nesterov's form of --server-momentum (DiLoCo's outer step).",
    )
    server_momentum_delay: int = declare(
        0,
        non_negative,
        exclusive=True,
        help="--server-momentum starts after this many rounds (0 before); 0: from round 1.",
    )
    # Resolved against the store when the run is set up (setup/epochs.py).
    server_momentum_delay_epochs: float | None = declare(
        None,
        optional(positive),
        exclusive=True,
        help="The delay as passes over a shard (sets --server-momentum-delay in rounds).",
    )

    def __post_init__(self) -> None:
        validate(self)
        if self.server_lr_rule == "fedexp" and self.server_lr != 1.0:
            raise SettingError(
                f"{setting('server_lr_rule', 'fedexp')} chooses the server step itself; drop "
                f"{setting('server_lr')} or use {setting('server_lr_rule', 'fixed')}"
            )
        if self.server_nesterov and not self.server_momentum:
            raise SettingError(
                f"{setting('server_nesterov')} is a form of momentum; set "
                f"{setting('server_momentum')} above 0 (DiLoCo: 0.9) or drop it"
            )
        delayed = self.server_momentum_delay or self.server_momentum_delay_epochs
        if delayed and not self.server_momentum:
            raise SettingError(
                f"{setting('server_momentum_delay')} delays {setting('server_momentum')}, "
                "which is 0; set it above 0 (SlowMo: 0.5) or drop the delay"
            )

    @property
    def scales_nothing(self) -> bool:
        """s = 1: no --server-lr, no FedExP."""
        return self.server_lr == 1.0 and self.server_lr_rule == "fixed"

    @property
    def state_type(self) -> type | None:
        return MomentumState if self.server_momentum else None

    def init_state(self, weights: torch.Tensor) -> MomentumState | None:
        import torch

        return MomentumState(velocity=torch.zeros_like(weights)) if self.server_momentum else None

    def label(self) -> str:
        beta, delay, text = self.server_momentum, self.server_momentum_delay, ""
        if beta:
            after = f" after {delay}" if delay else ""
            text = f" server-momentum={beta:g}{after}" + (
                " nesterov" if self.server_nesterov else ""
            )
        if self.server_lr_rule == "fedexp":
            return text + " server-lr=fedexp"
        return text + (f" server-lr={self.server_lr:g}" if self.server_lr != 1.0 else "")

    def shard_metrics(self, weights: torch.Tensor, solution: torch.Tensor) -> dict[str, float]:
        """What a shard reports for this step (FedExP's ||v_i - w||^2; nothing when fixed)."""
        import torch

        if self.server_lr_rule != "fedexp":
            return {}
        return {UPDATE_SQUARED: float(torch.sum((solution - weights) ** 2))}

    def scale(
        self, metrics: dict[str, float], weights: torch.Tensor, proposal: torch.Tensor
    ) -> float:
        """s for this round: --server-lr, or FedExP's from the shards' averaged ||Delta_i||^2."""
        import torch

        if self.server_lr_rule != "fedexp":
            return self.server_lr
        averaged = float(torch.sum((proposal - weights) ** 2))
        return max(1.0, metrics[UPDATE_SQUARED] / (2.0 * (averaged + FEDEXP_EPSILON)))

    def update(
        self, end: RoundEnd, proposal: torch.Tensor, metrics: dict[str, float] | None = None
    ) -> RoundUpdate:
        """The round's end from its proposal: the new weights, the momentum state (from the
        driver state's `velocity`, None without momentum) and the round metrics, `metrics`
        first, then the step size s where not 1 (beta is 0 in the delay's rounds)."""
        weights = end.weights
        beta = self.server_momentum if end.round_index > self.server_momentum_delay else 0.0
        s = self.scale(end.mean.metrics, weights, proposal)
        # w + s (w_avg - w); the proposal itself, bit for bit, at s = 1.
        scaled = proposal if s == 1.0 else weights + s * (proposal - weights)
        new_weights, state = momentum_step(beta, end.state, weights, scaled, self.server_nesterov)
        metrics = {**(metrics or {}), **({} if self.scales_nothing else {"server_lr": s})}
        return RoundUpdate(weights=new_weights, state=state, metrics=metrics)


# The metadata of the field an algorithm takes its server step in, built from the run's
# settings: `server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)`.
SERVER_PART = part(ServerStep)
