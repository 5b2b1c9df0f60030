"""Exact local solves for convex models: argmin_v f_i(v) - <c, v> + (mu/2)||v - a||^2.

Legend: v = local variable, c = linear term, a = anchor, mu = proximal strength, h = the local
objective above, r = grad h(v) = grad f_i(v) - c + mu (v - a).
Stops when ||r|| <= tol * ||r(start)|| (relative gradient norm), or at the rounding floor of r
(when DANE is at the optimum, r(start) = eta*g is itself rounding noise and no solver can
reduce it by 1e-10), using the full shard in every evaluation, so the result is deterministic
(the rng is not used).
- "cg": Newton-CG. Each Newton step solves (H_i(v) + mu I) p = -r by conjugate gradients with
  Hessian-vector products to the same tolerance, then backtracks on h (Armijo). For a quadratic
  f_i the first step is the exact minimiser, so DANE's update becomes the closed form.
- "lbfgs": L-BFGS (20 pairs), with the same step acceptance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ...engine.protocol import validate
from .checks import one_of, relative_tolerance
from .hyperparameters import declare
from .local_problem import LocalProblem, Solution, StopRule

if TYPE_CHECKING:
    import torch

EXACT_METHODS = ("lbfgs", "cg")


@dataclass(frozen=True, kw_only=True)
class ExactSolver:
    """--local-solver lbfgs | cg, to --local-tol: an exact (to a tolerance) local solve."""

    SECTION: ClassVar[str] = "solver"  # its settings' section ([solver], and its --help panel)

    local_solver: str  # lbfgs | cg (the run's choice of solver: solvers.make_solver)
    local_tol: float = declare(
        1e-10, relative_tolerance, help="lbfgs/cg: relative gradient-norm tolerance."
    )
    max_newton_steps: int = 50
    max_iterations: int = 5000  # CG iterations per Newton step, or L-BFGS iterations

    def __post_init__(self) -> None:
        one_of(*EXACT_METHODS)("local_solver", self.local_solver)
        validate(self)

    def label(self) -> str:
        return self.local_solver

    def solve(
        self,
        problem: LocalProblem,
        start: torch.Tensor,
        rng: torch.Generator,
        *,
        round_index: int = 1,
        stop: StopRule | None = None,
        state: None = None,
    ) -> Solution:
        """The minimiser of `problem` from `start` (as LocalSolver.solve; the tolerance is the
        stopping rule here, `round_index` and `stop` do not apply, and an exact solve has no
        optimizer state to keep: `state` is always None, --local-optimizer-state is refused)."""
        exact = _Exact(problem)
        v, first_loss, iterations = _descend(exact, start.detach().clone(), self)
        rows = exact.passes * problem.objective.num_samples
        return Solution(weights=v, first_loss=first_loss, steps=iterations, rows=rows)


@dataclass
class _Exact:
    """The local problem with what the exact methods add: a stopping floor and the Hessian.

    `passes` counts full passes over the shard (values, gradients, Hessian products).
    """

    problem: LocalProblem
    passes: int = 0

    def value_and_grad(self, v: torch.Tensor) -> tuple[float, torch.Tensor, float]:
        self.passes += 1
        return self.problem.value_and_grad(v)

    def target(self, tol: float, v: torch.Tensor, r: torch.Tensor) -> float:
        """tol * ||r||, but not below the rounding noise of computing r at v."""
        import torch

        self.passes += 1
        _, grad_f = self.problem.objective.loss_and_grad(v)
        linear = self.problem.linear
        scale = float(grad_f.norm()) + (float(linear.norm()) if linear is not None else 0)
        floor = 1e2 * torch.finfo(v.dtype).eps * scale
        return max(tol * float(r.norm()), floor)

    def hessian(self, v: torch.Tensor):  # type: ignore[no-untyped-def]
        hess = self.problem.objective.hessian_operator(v)
        mu = self.problem.mu if self.problem.anchor is not None else 0.0

        def product(p: torch.Tensor) -> torch.Tensor:
            self.passes += 1
            return hess(p) + mu * p if mu else hess(p)

        return product


def _conjugate_gradient(apply, b: torch.Tensor, *, tol: float, max_iterations: int):  # type: ignore[no-untyped-def]
    """x with ||A x - b|| <= tol (absolute), A symmetric positive definite given by `apply`."""
    import torch

    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rs = float(torch.dot(r, r))
    for _ in range(max_iterations):
        if math.sqrt(rs) <= tol:
            break
        ap = apply(p)
        curvature = float(torch.dot(p, ap))
        if curvature <= 0:  # not positive definite along p (should not happen: convex + mu)
            break
        alpha = rs / curvature
        x.add_(p, alpha=alpha)
        r.sub_(ap, alpha=alpha)
        rs_next = float(torch.dot(r, r))
        p = r + (rs_next / rs) * p
        rs = rs_next
    return x


def _descend(problem: _Exact, v: torch.Tensor, solver: ExactSolver):  # type: ignore[no-untyped-def]
    """Newton-CG ("cg") or L-BFGS (two-loop recursion, 20 pairs), both from `v` until
    ||grad h|| reaches the target, each step accepted by `_backtrack`.

    torch.optim.LBFGS's line search compares function values, which stop changing in floating
    point near the optimum (|h - h*| ~ ||v - v*||^2), so it stalls at a relative accuracy of
    about 1e-8; accepting a step that lowers ||grad h|| lets it reach 1e-10 and below.
    """
    import torch

    h, r, first_loss = problem.value_and_grad(v)
    target = problem.target(solver.local_tol, v, r)
    newton = solver.local_solver == "cg"
    pairs: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    steps = 0
    most = solver.max_newton_steps if newton else solver.max_iterations
    for steps in range(most):  # noqa: B007  (the count is returned)
        if float(r.norm()) <= target:
            break
        if newton:
            # In exact arithmetic CG ends within d iterations; 3d allows for rounding.
            iterations = min(solver.max_iterations, 3 * v.numel())
            p = _conjugate_gradient(problem.hessian(v), -r, tol=target, max_iterations=iterations)
        else:
            p = -_two_loop(r, pairs)
            if not pairs:  # no curvature seen yet: a first step of length at most 1
                p = p / max(1.0, float(r.norm()))
        accepted = _backtrack(problem, v, h, r, p)
        if accepted is None:
            break  # no step lowers h or ||grad h||: rounding noise, v is as good as it gets
        candidate, h_new, r_new = accepted
        if not newton:
            s_k, y_k = candidate - v, r_new - r
            curvature = float(torch.dot(s_k, y_k))
            if curvature > 1e-16 * float(s_k.norm()) * float(y_k.norm()):
                pairs = [*pairs[-19:], (s_k, y_k, 1.0 / curvature)]
        v, h, r = candidate, h_new, r_new
    return v, first_loss, steps


def _backtrack(problem: _Exact, v: torch.Tensor, h: float, r: torch.Tensor, p: torch.Tensor):  # type: ignore[no-untyped-def]
    """Halve the step along p (at most 40 times) until h or ||grad h|| decreases.

    Returns (v + step * p, its h, its gradient), or None if no step does.
    """
    import torch

    slope = float(torch.dot(r, p))
    step = 1.0
    for _ in range(40):
        candidate = v + step * p
        h_new, r_new, _ = problem.value_and_grad(candidate)
        if h_new <= h + 1e-4 * step * slope or float(r_new.norm()) < float(r.norm()):
            return candidate, h_new, r_new
        step *= 0.5
    return None


def _two_loop(g: torch.Tensor, pairs: list[tuple[torch.Tensor, torch.Tensor, float]]):  # type: ignore[no-untyped-def]
    """The L-BFGS inverse-Hessian approximation applied to g (Nocedal & Wright, alg. 7.4)."""
    import torch

    q = g.clone()
    alphas = []
    for s_k, y_k, rho in reversed(pairs):
        alpha = rho * float(torch.dot(s_k, q))
        q.sub_(y_k, alpha=alpha)
        alphas.append(alpha)
    if pairs:
        s_k, y_k, _ = pairs[-1]
        q.mul_(float(torch.dot(s_k, y_k)) / float(torch.dot(y_k, y_k)))
    for (s_k, y_k, rho), alpha in zip(pairs, reversed(alphas), strict=True):
        beta = rho * float(torch.dot(y_k, q))
        q.add_(s_k, alpha=alpha - beta)
    return q
