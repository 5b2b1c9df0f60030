"""The K-step solver of the local problem (local_problem.py), and the settings it shares.

LocalSolver: at most K minibatch steps of SGD (with momentum) or Adam on it, at --local-lr
times the round's schedule factor (schedule.py), stopping early where the caller's rule says
it is solved well enough (InexactDANE, S-DANE); exact_solver.py solves convex models exactly.
--local-clip C scales each step's gradient of h (linear and proximal terms included) down to
norm C where it is longer, as the FedDyn authors do: on skewed shards a learned tilt feeds
its own solves round over round, and the clip caps how far one step can follow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ...engine.protocol import validate
from . import optimizer_state as kept
from .checks import at_least_one, momentum_range, non_negative, one_of, optional, positive
from .hyperparameters import Declaration, declare
from .local_problem import LocalProblem, Solution, StopRule  # importers take them from here too
from .local_steps_schedule import LOCAL_STEPS_SCHEDULES, QSR_DEFAULT_CAP, local_steps_at
from .schedule import SCHEDULES, lr_factor
from .setting_error import SettingError, setting

if TYPE_CHECKING:
    import torch

LOCAL_OPTIMIZERS = ("sgd", "adam")
# --local-lr-scaling: how the local rate grows with the shards' combined batch m B against
# the batch it was tuned at (--local-lr-reference-batch): x (m B / B_ref)^p. linear is Goyal
# et al.'s rule (2017) and Lin et al.'s for local SGD (2020); sqrt keeps the update's noise
# per example (Krizhevsky 2014; Malladi et al. 2022 for adaptive steps).
LR_SCALINGS = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}
DEFAULT_CLIP = 1.0  # --local-clip unset: the local steps' gradients clipped to this norm

# Settings more than one class takes, each declared here once (hyperparameters.py).
# Unset: by algorithm and model (well_posed.py), so that a network's local problem is bounded.
MU = Declaration(
    default=None,
    rule=optional(non_negative),
    help="Proximal strength (dane, fedprox; sdane lam, feddyn alpha) [dane on networks: 0.01, "
    "0.1 past 4 passes a solve; dane on linear/logistic 0; feddyn 0.01; fedprox 0; sdane: "
    "none].",
)
TRUST_RADIUS = Declaration(
    default=0.0,
    rule=non_negative,
    exclusive=True,
    help="Skewed shards (dane, feddyn): steps within ||v - w|| <= R; 0: off.",
)
LOCAL_LR = Declaration(default=0.05, rule=positive, help="Learning rate, gd/agd step.")
BATCH_SIZE = Declaration(default=32, rule=at_least_one, help="Minibatch size per shard.")
MOMENTUM = Declaration(default=0.9, rule=momentum_range, help="SGD momentum (agd: beta).")
LR_SCHEDULE = Declaration(
    default="constant",
    rule=one_of(*SCHEDULES),
    help="--local-lr across rounds: constant | cosine | step.",
)


@dataclass(frozen=True, kw_only=True)
class LocalSolver:
    """At most K minibatch steps (--local-steps) of --local-optimizer at --local-lr."""

    SECTION: ClassVar[str] = "solver"  # its settings' section ([solver], and its --help panel)

    local_steps: int = declare(30, at_least_one, help="Local solver steps K.")
    # K as passes over a shard, resolved against the store when the run is set up
    # (setup/epochs.py): the same settings then make one pass a round on any m.
    local_epochs: float | None = declare(
        None,
        optional(positive),
        help="K as passes over a shard a round: E x rows per shard / --batch-size (sets K).",
    )
    local_lr: float = LOCAL_LR.field()
    batch_size: int = BATCH_SIZE.field()
    local_optimizer: str = declare("sgd", one_of(*LOCAL_OPTIMIZERS), help="sgd | adam.")
    momentum: float = MOMENTUM.field()
    # Each shard's momentum (Adam's moments) carried into its next round (optimizer_state.py).
    local_optimizer_state: str = declare(
        "reset",
        one_of(*kept.LOCAL_STATES),
        help="The local optimizer's momentum each round: reset (zero) | keep (carried on).",
    )
    lr_schedule: str = LR_SCHEDULE.field()
    # Unset: DEFAULT_CLIP. A first run on a network nobody tuned for must not blow up: over
    # 15 networks and 2 stores, clipping at 1 was the one default with no spike and no run
    # thrown to chance (`dane bench defaults`, docs/results/defaults.md, issue 34). 0 is the
    # paper's DANE (and every algorithm's steps) unclipped.
    local_clip: float | None = declare(
        None,
        optional(non_negative),
        help=f"Clip each local step's gradient to this norm; 0: off (the paper's DANE) "
        f"[{DEFAULT_CLIP:g}].",
    )
    lr_scaling: str = declare(
        "none",
        one_of(*LR_SCALINGS),
        help="--local-lr for m shards: none | sqrt | linear: times (m B / B_ref)^(0, 1/2, 1).",
    )
    lr_reference_batch: int = declare(
        0,
        non_negative,
        help="B_ref, the batch --local-lr was tuned at; 0: --batch-size (one shard's).",
    )
    # Rounds over which the lr rises linearly to --local-lr (round t of R: t / R of it); 0: none.
    lr_warmup: int = declare(
        0,
        non_negative,
        help="Local steps: --local-lr rises linearly over this many rounds; 0: off.",
    )
    # Resolved against the store when the run is set up (setup/epochs.py), like
    # --local-epochs: the rounds that hold that many passes over a shard set lr_warmup.
    lr_warmup_epochs: float | None = declare(
        None,
        optional(positive),
        help="The warm-up as passes over a shard (sets --local-lr-warmup in rounds).",
    )
    # K per round (local_steps_schedule.py): QSR grows it as --lr-schedule decays the rate;
    # post-local takes one step a round (synchronous SGD) for --sync-rounds rounds first.
    local_steps_schedule: str = declare(
        "constant",
        one_of(*LOCAL_STEPS_SCHEDULES),
        help="K per round: constant | qsr (grows as the lr decays) | post-local.",
    )
    local_steps_max: int = declare(
        0, non_negative, help=f"qsr: most local steps a round; 0: {QSR_DEFAULT_CAP} K."
    )
    sync_rounds: int = declare(
        0, non_negative, help="post-local: rounds of one local step each before K."
    )
    sync_epochs: float | None = declare(
        None,
        optional(positive),
        help="post-local: the synchronous phase as passes over a shard (sets --sync-rounds).",
    )
    rounds: int = 1  # the schedule's span (--rounds)
    # m, the run's shards: set where the run is set up (run_setup.py), for --local-lr-scaling.
    shards: int = 1

    def __post_init__(self) -> None:
        validate(self)
        if self.local_clip is None:  # resolved here, as DANE's mu is: the solver says its clip
            object.__setattr__(self, "local_clip", DEFAULT_CLIP)
        kept.check_kept(self.local_optimizer_state, self.local_optimizer, self.momentum)
        # Each schedule's own setting only with it; a cap below K would cut K itself.
        schedule = self.local_steps_schedule
        own = {"local_steps_max": "qsr", "sync_rounds": "post-local", "sync_epochs": "post-local"}
        for name, applies in own.items():
            if getattr(self, name) and schedule != applies:
                raise SettingError(
                    f"{setting(name)} applies to {setting('local_steps_schedule', applies)}; "
                    f"drop it or set that schedule"
                )
        if self.local_steps_max and self.local_steps_max < self.local_steps:
            raise SettingError(
                f"{setting('local_steps_max')} is below {setting('local_steps')}: QSR only "
                f"lengthens the local solve; raise it or lower {setting('local_steps')}"
            )
        if schedule == "post-local" and not (self.sync_rounds or self.sync_epochs):
            raise SettingError(
                f"{setting('local_steps_schedule', 'post-local')} needs {setting('sync_rounds')} "
                f"or {setting('sync_epochs')} above 0 (synchronous SGD before the local steps)"
            )

    @property
    def clip_norm(self) -> float:
        """The norm the local steps' gradients are clipped to; 0: not clipped."""
        return DEFAULT_CLIP if self.local_clip is None else self.local_clip

    def label(self) -> str:
        schedule = "" if self.lr_schedule == "constant" else f" {self.lr_schedule}"
        clip = f" clip={self.clip_norm:g}" if self.clip_norm else ""
        warmup = f" warmup={self.lr_warmup}" if self.lr_warmup else ""
        scaling = f" ({self.lr_scaling} rule)" if self.lr_scaling != "none" else ""
        steps = f"K={self.local_steps}"
        if self.local_steps_schedule == "qsr":
            steps += "(qsr)"
        elif self.local_steps_schedule == "post-local":
            steps += f"(after {self.sync_rounds} of 1)"
        lr = f"lr={self.base_lr:g}{scaling}"
        carried = " kept-state" if self.keeps_state else ""
        return f"{steps} {lr}{schedule}{warmup}{clip} B={self.batch_size}{carried}"

    @property
    def keeps_state(self) -> bool:  # --local-optimizer-state keep: into the shard's next round
        return self.local_optimizer_state == "keep"

    def fresh_state(self, weights: torch.Tensor) -> kept.LocalOptimizerState | None:
        """A shard's kept state before round 1; None where it is reset each round."""
        return kept.fresh_state(weights, self.local_optimizer) if self.keeps_state else None

    @property
    def base_lr(self) -> float:
        """--local-lr scaled to the run's m shards by --local-lr-scaling (before schedules)."""
        power = LR_SCALINGS[self.lr_scaling]
        if not power:
            return self.local_lr
        reference = self.lr_reference_batch or self.batch_size
        return self.local_lr * (self.shards * self.batch_size / reference) ** power

    def steps(self, round_index: int) -> int:
        """K_t: the local steps of round `round_index` (--local-steps-schedule)."""
        return local_steps_at(
            self.local_steps_schedule,
            self.local_steps,
            round_index,
            factor=lr_factor(self.lr_schedule, round_index, self.rounds),
            sync_rounds=self.sync_rounds,
            cap=self.local_steps_max,
        )

    def pseudo_grad_norm(self, start: torch.Tensor, end: torch.Tensor, round_index: int) -> float:
        """||start - end|| / (K_t lr): a round's averaged update expressed as a gradient."""
        return float(((start - end) / (self.steps(round_index) * self.base_lr)).norm())

    def lr(self, round_index: int) -> float:
        """The learning rate of round `round_index`: --local-lr (scaled to m shards) times the
        schedule's factor, times round_index / R during a warm-up of R rounds."""
        warmup = min(1.0, round_index / self.lr_warmup) if self.lr_warmup else 1.0
        return self.base_lr * lr_factor(self.lr_schedule, round_index, self.rounds) * warmup

    def solve(
        self,
        problem: LocalProblem,
        start: torch.Tensor,
        rng: torch.Generator,
        *,
        round_index: int = 1,
        stop: StopRule | None = None,
        state: kept.LocalOptimizerState | None = None,
    ) -> Solution:
        """Approximately minimise `problem` from `start`: K steps, or fewer where `stop` says
        so (checked from the second step on: the first always moves). With `state` (a kept
        optimizer state) the steps go on from it, and the Solution carries the state after."""
        import torch

        from .step_clip import clip_norm_  # imports torch: not at the settings' import

        objective, linear, anchor = problem.objective, problem.linear, problem.anchor
        v = start.detach().clone().requires_grad_(True)
        lr, clip = self.lr(round_index), self.clip_norm
        if self.local_optimizer == "adam":
            opt = torch.optim.Adam([v], lr=lr)
        else:
            opt = torch.optim.SGD([v], lr=lr, momentum=self.momentum)
        if state is not None:
            kept.load_state(opt, v, state, self.local_optimizer)
        # The first batch's loss read once the steps are queued (on a GPU a read waits for them)
        first, steps, drawn = None, 0, 0
        for step in range(self.steps(round_index)):
            opt.zero_grad()  # None: the backward hands its gradient over, no zeroing or adding
            drawn += 1
            loss = objective.batch_loss(v, objective.sample_rows(self.batch_size, rng))
            loss.backward()
            first = loss.detach() if step == 0 else first
            with torch.no_grad():
                # The linear and proximal terms have closed-form gradients: add them directly.
                if linear is not None:
                    v.grad.sub_(linear)
                if problem.mu and anchor is not None:
                    v.grad.add_(v - anchor, alpha=problem.mu)
                if step > 0 and stop is not None and stop(v.grad, v):
                    break
                if clip:  # C = 0: leave it
                    clip_norm_(v.grad, clip)  # scaled down to norm C where it is longer
            opt.step()
            with torch.no_grad():
                problem.project(v)  # projected SGD: every iterate stays in the region
            steps += 1
        rows = drawn * min(self.batch_size, objective.num_samples)
        after = None if state is None else kept.read_state(opt, v, state, steps)
        first_loss = float("nan") if first is None else float(first)
        return Solution(
            weights=v.detach(), first_loss=first_loss, steps=steps, rows=rows, state=after
        )


def needs_steps(solver: object, algorithm: str, why: str) -> None:
    """An algorithm whose round is defined by K local steps refuses the exact solvers."""
    if not isinstance(solver, LocalSolver):
        raise SettingError(
            f"{setting('algorithm', algorithm)} takes K local steps "
            f"({setting('local_solver', 'steps')}); {why}"
        )


def check_trust_radius(radius: float, solver: object) -> None:
    """A trust region bounds K projected steps; the exact solvers solve the unbounded problem."""
    if radius and not isinstance(solver, LocalSolver):
        raise SettingError(
            f"{setting('trust_radius')} bounds the local steps of "
            f"{setting('local_solver', 'steps')}; lbfgs and cg solve the unbounded problem: "
            f"drop {setting('trust_radius')} or use {setting('local_solver', 'steps')}"
        )
