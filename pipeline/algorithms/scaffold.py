"""SCAFFOLD (Karimireddy et al., ICML 2020): local steps corrected by control variates.

Legend: w = weights at the start of the round, c = the server's control variate, c_i = shard
i's, y_i = shard i's weights after K local steps, lr = the round's local learning rate.
One round (full participation, the paper's option II for c_i):
    every shard receives w and c;  y_i = K SGD steps on f_i(y) - <c_i - c, y> from w
    c_i' = c_i - c + (w - y_i) / (K * lr)
    w' = mean_i y_i;   c' = c + mean_i (c_i' - c_i)
So a round moves twice the model each way: c travels with w (Strategy.opening), and every
shard sends its control update with its weights; the pipeline counts both. c is the driver
state, c_i each shard's own state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from ..engine.protocol import LocalContext, LocalOutput, RoundEnd, RoundUpdate, Tensors
from .fedavg import SolveAndAverage
from .parts.local_solver import LocalProblem, LocalSolver, needs_steps
from .parts.optimizer_state import refuse_kept_state
from .parts.server import SERVER_PART, ServerStep
from .parts.solvers import SOLVER_PART

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class ScaffoldState:
    control: torch.Tensor  # c
    velocity: torch.Tensor | None = None  # the server step's momentum, where it has one


@dataclass(frozen=True, kw_only=True)
class ScaffoldShardState:
    control: torch.Tensor  # c_i


@dataclass(frozen=True, kw_only=True)
class Scaffold(SolveAndAverage):
    """Solve-and-average whose K local steps are corrected by the control variates."""

    solver: LocalSolver = field(metadata=SOLVER_PART)
    server: ServerStep = field(default_factory=ServerStep, metadata=SERVER_PART)

    name: ClassVar[str] = "scaffold"
    state_type: ClassVar[type | None] = ScaffoldState
    shard_state_type: ClassVar[type | None] = ScaffoldShardState

    def __post_init__(self) -> None:
        super().__post_init__()
        needs_steps(self.solver, self.name, "its control update is defined by them")
        refuse_kept_state(self.solver, self.name)

    def init_state(self, weights: torch.Tensor) -> ScaffoldState:
        import torch

        momentum = self.server.init_state(weights)
        velocity = momentum.velocity if momentum is not None else None
        return ScaffoldState(control=torch.zeros_like(weights), velocity=velocity)

    def init_shard_state(self, weights: torch.Tensor) -> ScaffoldShardState:
        import torch

        return ScaffoldShardState(control=torch.zeros_like(weights))

    def opening(self, state: ScaffoldState) -> Tensors:
        return {"control": state.control}

    def local(self, ctx: LocalContext) -> LocalOutput:
        c, c_i = ctx.received["control"], ctx.shard_state.control
        # grad of f_i(y) - <c_i - c, y> is grad f_i(y) - c_i + c: the corrected local step.
        problem = LocalProblem(ctx.objective, linear=c_i - c)
        solution = self.solver.solve(problem, ctx.weights, ctx.rng, round_index=ctx.round_index)
        y_i = solution.weights
        step_size = max(solution.steps, 1) * self.solver.lr(ctx.round_index)
        c_i_next = c_i - c + (ctx.weights - y_i) / step_size
        spread = self.server.shard_metrics(ctx.weights, y_i)
        return LocalOutput(
            tensors={"weights": y_i, "control_delta": c_i_next - c_i},
            metrics={"train_loss": solution.first_loss, **spread},
            shard_state=ScaffoldShardState(control=c_i_next),
            rows=solution.rows,
        )

    def update(self, end: RoundEnd) -> RoundUpdate:
        y = end.mean.tensors["weights"]
        control = end.state.control + end.mean.tensors["control_delta"]
        # The averaged update expressed as a gradient, comparable with the others' grad_norm.
        grad_norm = self.solver.pseudo_grad_norm(end.weights, y, end.round_index)
        # The server step's momentum state is this state's velocity, where it has one.
        momentum = end.state if end.state.velocity is not None else None
        stepped = self.server.update(replace(end, state=momentum), y, {"grad_norm": grad_norm})
        velocity = stepped.state.velocity if stepped.state is not None else None
        return replace(stepped, state=ScaffoldState(control=control, velocity=velocity))
