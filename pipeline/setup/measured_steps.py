"""K chosen from a run's measured costs (--overhead-share), as the run's settings see it.

The rule is parts/local_work.py's; the measuring on the cluster is the engine's
(pipeline/engine/run/round_costs.py), which runs `time_local_work` on a worker. Here: that
timing, the rows a round's other phases read, the ceiling on K, the line that reports the
choice, and the setup with the chosen K. The chosen K replaces the setting: config.toml holds
`local_steps = K` and no overhead_share (the measurements in a comment), so a rerun from that
file, or a resume, trains the same K without measuring again.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import torch

from ..algorithms.parts.local_problem import LocalProblem
from ..algorithms.parts.local_solver import LocalSolver
from ..algorithms.parts.local_steps_schedule import steps_for_epochs
from ..algorithms.parts.local_work import CEILING_EPOCHS, RoundCosts, steps_for_share
from ..engine.round.shards import load_shard, make_objective
from .epochs import strategy_on_store, with_epochs_resolved, with_strategy_resolved

if TYPE_CHECKING:
    from ...models.flat import Buffers
    from ...models.registry import ModelSpec
    from ..engine.plan import RunSetup

# How the line that reports the choice begins: config.toml keeps it as a comment, and a resume
# writes it again (run/loop.py), so the file says where its K came from for the run's life.
CHOSEN = "--overhead-share"
TIMED_S = 0.2  # about this long timing local steps: enough steps that the clock's grain is lost
MOST_STEPS = 50  # ... and never more steps than this


def solver_of(setup: RunSetup) -> LocalSolver:
    """The run's local solver as one step of it costs: its optimizer, batch and clip."""
    config = setup.config
    return LocalSolver(
        local_steps=1,
        local_lr=config.local_lr,
        batch_size=config.batch_size,
        local_optimizer=config.local_optimizer,
        momentum=config.momentum,
        local_clip=config.local_clip,
    )


def time_local_work(
    spec: ModelSpec,
    load_args: dict[str, Any],
    weights: torch.Tensor,
    buffers: Buffers,
    solver: LocalSolver,
    *,
    rows: int,
    gradient: bool,
) -> tuple[float, float]:
    """On a worker: (seconds of one of `solver`'s steps, seconds a row of a full-pass gradient,
    0.0 unless `gradient`), on the first `rows` rows of the shard `load_args` names."""
    shard = load_shard(**{**load_args, "stop": min(load_args["stop"], load_args["start"] + rows)})
    objective = make_objective(spec, shard, buffers)
    device = shard.x.device
    start, problem = weights.to(device), LocalProblem(objective=objective)

    def timed(steps: int) -> float:
        begun = time.perf_counter()
        solver_n = dataclasses.replace(solver, local_steps=steps)
        solver_n.solve(problem, start, torch.Generator().manual_seed(0))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the work, not its launch
        return time.perf_counter() - begun

    timed(2)  # the first steps allocate and compile: not what a round's steps cost
    once = timed(1)
    steps = max(2, min(MOST_STEPS, int(TIMED_S / max(once, 1e-6))))
    step_s = timed(steps) / steps
    if not gradient:
        return step_s, 0.0
    begun = time.perf_counter()
    objective.loss_and_grad(start)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return step_s, (time.perf_counter() - begun) / objective.num_samples


def gradient_rows(setup: RunSetup) -> tuple[int, float]:
    """The rows a gradient pass of the round reads (the largest shard's training rows, or
    --grad-sample's), and the rows it adds for each local step (--grad-sample-local's)."""
    config, store = setup.config, setup.store
    largest = max(stop - start for start, stop in store.shards)
    rows = getattr(config, "grad_sample", 0) or round(largest * (1 - config.val_fraction))
    local = getattr(config, "grad_sample_local", 0.0) or 0.0
    if local:  # a sample sized by the round's local rows: it grows with K
        return 0, local * config.batch_size
    return rows, 0.0


def steps_ceiling(setup: RunSetup) -> int:
    """The most K may be: CEILING_EPOCHS passes over a shard, and --local-steps-max (qsr)."""
    config, store = setup.config, setup.store
    shape = (store.num_train, store.num_shards, config.batch_size, config.val_fraction)
    ceiling = steps_for_epochs(CEILING_EPOCHS, *shape)
    return min(ceiling, config.local_steps_max) if config.local_steps_max else ceiling


def choose_steps(setup: RunSetup, costs: RoundCosts) -> tuple[int, str]:
    """K for the run's --overhead-share, and the line that says how it was chosen (printed as
    the run starts, and a comment in config.toml)."""
    share, ceiling = setup.config.overhead_share, steps_ceiling(setup)
    assert share is not None, "choose_steps is for a run that sets overhead_share"
    steps = steps_for_share(costs, share, ceiling)

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.3g} ms"

    line = (
        f"{CHOSEN} {share:g} chose K = {steps} local steps from costs measured as the "
        f"run started: c = {ms(costs.step_s)} a step, F = {ms(costs.fixed_s)} fixed a round "
        f"({ms(costs.phases_s)} of it the phases without local steps), T_comm = "
        f"{ms(costs.comm_s)} a round; K = ceil((F + T_comm)(1 - S) / (S c)) within "
        f"[1, {ceiling}]"
    )
    return steps, line


def with_local_steps(setup: RunSetup, steps: int) -> RunSetup:
    """`setup` training K = `steps`, as if given (--local-steps K, no --overhead-share): the
    settings counted along K (--local-lr-warmup-epochs) and the strategy made again."""
    given = dataclasses.replace(setup.config, local_steps=steps, overhead_share=None)
    config = with_epochs_resolved(given, setup.store)
    # What the strategy fills (DANE's mu reads K) is written in for the chosen K, as
    # prepare_run writes it for a K given; the strategy is built once.
    strategy = strategy_on_store(config, setup.store)
    config = with_strategy_resolved(config, strategy, setup.spec.l2)
    return dataclasses.replace(setup, config=config, strategy=strategy)
