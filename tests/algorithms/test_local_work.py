"""--overhead-share's rule (parts/local_work.py): the smallest K whose round leaves at most the
share S to its fixed cost F and collective T, K >= (F + T)(1 - S) / (S c), within [1, ceiling]."""

from __future__ import annotations

import pytest

from dask_dane.pipeline.algorithms.parts.local_work import RoundCosts, steps_for_share


def _costs(step_ms: float, fixed_ms: float, comm_ms: float, phases_ms: float = 0.0) -> RoundCosts:
    return RoundCosts(
        step_s=step_ms / 1e3, hops_s=fixed_ms / 1e3, phases_s=phases_ms / 1e3, comm_s=comm_ms / 1e3
    )


@pytest.mark.parametrize(
    ("step_ms", "fixed_ms", "comm_ms", "share", "expected"),
    [
        (2.0, 10.0, 2.0, 0.1, 54),  # 12 ms x 0.9 / (0.1 x 2 ms): exactly 54, not 55
        (1.0, 10.0, 2.0, 0.1, 108),  # compute twice as fast: twice the steps
        (2.0, 22.0, 2.0, 0.1, 108),  # a round twice as dear: twice the steps
        (3.5, 10.0, 0.0, 0.1, 26),  # 25.7 rounds up: 25 steps would leave F above S
        (2.0, 10.0, 2.0, 0.5, 6),  # half the round may be overhead: (F + T) / c
        (10.0, 3.0, 0.0, 0.5, 1),  # 0.3 of a step: at least one
        (2.0, 0.0, 0.0, 0.1, 1),  # nothing to amortise: one step
    ],
)
def test_k_is_the_smallest_that_keeps_the_overhead_within_the_share(
    step_ms, fixed_ms, comm_ms, share, expected
):
    costs = _costs(step_ms, fixed_ms, comm_ms)

    steps = steps_for_share(costs, share, ceiling=1000)

    assert steps == expected
    overhead = (fixed_ms + comm_ms) / 1e3

    def share_at(k: int) -> float:
        return overhead / (overhead + k * costs.step_s)

    assert share_at(steps) <= share + 1e-12
    assert steps == 1 or share_at(steps - 1) > share  # and no smaller K does


def test_the_other_phases_count_in_the_fixed_cost():
    # DANE's gradient pass (phases_s) costs whatever K is: it is amortised as the hops are.
    hops_only = _costs(2.0, fixed_ms=4.0, comm_ms=2.0, phases_ms=0.0)
    with_gradient = _costs(2.0, fixed_ms=4.0, comm_ms=2.0, phases_ms=6.0)

    assert with_gradient.fixed_s == pytest.approx(0.010)
    assert steps_for_share(hops_only, 0.1, 1000) == 27  # 6 ms x 9 / 2 ms
    assert steps_for_share(with_gradient, 0.1, 1000) == 54  # 12 ms x 9 / 2 ms


def test_k_is_clamped_to_the_ceiling_and_to_one():
    costly = _costs(step_ms=0.1, fixed_ms=100.0, comm_ms=0.0)

    assert steps_for_share(costly, 0.1, ceiling=360) == 360  # 9,000 wanted
    assert steps_for_share(costly, 0.1, ceiling=0) == 1  # a ceiling below one step: one
    assert steps_for_share(_costs(0.0, 5.0, 1.0), 0.1, ceiling=40) == 40  # a step too fast to time
