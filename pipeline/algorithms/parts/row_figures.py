"""What a round's metrics row shows of its algorithm beyond the algorithm's own metrics: the
rate and steps its schedules gave the round, and the gradient noise scale, raw and smoothed.

The built-in algorithms inherit RowFigures, whose Strategy.row_figures the driver's row
builder (engine/run/metrics.py round_row) calls: the engine knows nothing of solvers,
schedules or noise scales.
"""

from __future__ import annotations

from typing import Any

from ...engine.protocol import Strategy
from .local_solver import LocalSolver
from .noise_scale import FIGURES, ratio

# How fast the smoothed noise scale forgets (smoothed_noise): a run is tens of rounds and its
# noise scale changes as it trains, so the last five rounds or so weigh.
NOISE_EMA_DECAY = 0.8


class RowFigures:
    """Strategy.row_figures for the built-in algorithms (algorithm_figures)."""

    def row_figures(
        self, round_index: int, metrics: dict[str, float], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        return algorithm_figures(self, round_index, metrics, previous)  # type: ignore[arg-type]


def algorithm_figures(
    strategy: Strategy, round_index: int, metrics: dict[str, float], previous: dict | None
) -> dict[str, Any]:
    """The row's scheduled figures (`scheduled`), and the gradient noise scale at w
    (noise_scale.py; None where the round computes no per-shard gradient at w) with its
    averages over rounds (`smoothed_noise`; `previous`: the row before, None for the first)."""
    return {
        **scheduled(strategy, round_index),
        **{name: metrics.get(name) for name in FIGURES},
        **smoothed_noise(previous, metrics),
    }


def scheduled(strategy: Strategy, round_index: int) -> dict[str, Any]:
    """What the schedules gave round `round_index`: `local_lr`, the rate its local steps (or
    its step) used after --lr-schedule and --lr-warmup (None where it has no rate: an exact
    solver), and `scheduled_local_steps`, K_t of --local-steps-schedule (the strategy's own
    `local_steps`, where it reports one, is what a solve took, stopped early or not)."""
    solver = getattr(strategy, "solver", None)
    if isinstance(solver, LocalSolver):
        return {
            "local_lr": solver.lr(round_index),
            "scheduled_local_steps": solver.steps(round_index),
        }
    if hasattr(strategy, "lr"):  # sgd: the rate is the scheduled step itself
        return {"local_lr": strategy.lr(round_index)}
    if hasattr(strategy, "local_lr"):  # gd, agd: a constant step, no schedule
        return {"local_lr": strategy.local_lr}
    return {"local_lr": None}


def smoothed_noise(previous: dict[str, Any] | None, metrics: dict[str, float]) -> dict[str, Any]:
    """noise_trace_ema and noise_grad_sq_ema, exponential moving averages (NOISE_EMA_DECAY)
    of the rounds' noise_trace and noise_grad_sq apart, and noise_scale_ema, their ratio: the
    ratio of two noisy estimates is biased, so the paper smooths numerator and denominator.
    `previous` is the previous round's metrics row (None for the first): the averages resume
    from metrics.jsonl. A round without figures carries the previous averages on."""
    keys = ("noise_trace", "noise_grad_sq")
    before = [(previous or {}).get(f"{key}_ema") for key in keys]
    now = [metrics.get(key) for key in keys]
    smoothed = [
        old if new is None else new if old is None else old + (1 - NOISE_EMA_DECAY) * (new - old)
        for old, new in zip(before, now, strict=True)
    ]
    return {
        "noise_trace_ema": smoothed[0],
        "noise_grad_sq_ema": smoothed[1],
        "noise_scale_ema": ratio(*smoothed),
    }
