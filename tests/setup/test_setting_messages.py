# ruff: noqa: E501  (each message is one line on purpose, pinned whole)
"""Every refusal of the algorithms' settings, word for word (issue 24).

A refusal is what a user reads instead of a run: one line that names the setting and the
fix. The other tests match a phrase of each message; the mutation run showed that a changed
word anywhere else in it went unnoticed (tests/mutation/). The wording is pinned here, so a
change to a message is a change to this list, made on purpose.
"""

from __future__ import annotations

import dataclasses

import pytest

from dask_dane.pipeline.algorithms import ALGORITHMS, SettingError, make_strategy
from dask_dane.pipeline.setup.settings import AlgorithmSettings

DEFAULTS = dataclasses.asdict(AlgorithmSettings())
REFUSALS = [
    (
        "wrong-name",
        "nope",
        {},
        f"unknown algorithm 'nope'; choose one of: {', '.join(ALGORITHMS)}",  # the registry's order
    ),
    (
        "exclusive",
        "fedavg",
        {"grad_sample": 10},
        "grad_sample=10 applies to algorithm dane or sdane or sdane-adaptive only; drop it or use algorithm=dane",
    ),
    (
        "one-of",
        "dane",
        {"safeguard": "sometimes"},
        "unknown safeguard (--safeguard) 'sometimes'; choose one of: off, backtrack, adaptive-mu",
    ),
    ("positive", "dane", {"eta": 0.0}, "eta (--eta) must be a positive number (got 0.0)"),
    ("non-negative", "dane", {"mu": -1.0}, "mu (--mu) must be zero or positive (got -1.0)"),
    (
        "at-least-one",
        "dane",
        {"local_steps": 0},
        "local_steps (--local-steps) must be at least 1 (got 0)",
    ),
    (
        "momentum",
        "dane",
        {"momentum": 1.0},
        "momentum (--local-momentum) must be in [0, 1) (got 1.0)",
    ),
    (
        "tolerance",
        "dane",
        {"local_solver": "cg", "local_tol": 2.0},
        "local_tol (--local-tol) must be in (0, 1), a relative gradient norm (got 2.0); e.g. 1e-10",
    ),
    (
        "rows",
        "dane",
        {"grad_sample": -1},
        "grad_sample (--grad-sample) must be 0 (the full shard) or a number of rows (got -1)",
    ),
    (
        "at-least",
        "dane",
        {"grad_sample": 10, "grad_sample_growth": 0.5},
        "grad_sample_growth (--grad-sample-growth) must be at least 1 (got 0.5)",
    ),
    (
        "count",
        "dane",
        {"line_search": -1},
        "line_search (--line-search) must be 0 (off) or a positive count (got -1)",
    ),
    (
        "growth-without-sample",
        "dane",
        {"grad_sample_growth": 2.0},
        "grad_sample_growth grows the gradient sample from grad_sample=N rows; pass grad_sample=N as well",
    ),
    (
        "line-search-and-safeguard",
        "dane",
        {"line_search": 3, "safeguard": "backtrack"},
        "line_search chooses the step itself; it does not combine with safeguard or server_momentum: pass one of them",
    ),
    (
        "server-lr-and-safeguard",
        "dane",
        {"server_lr": 2.0, "safeguard": "backtrack"},
        "server_lr and server_lr_rule scale the averaged step; safeguard and line_search choose it: pass one",
    ),
    (
        "momentum-and-safeguard",
        "dane",
        {"server_momentum": 0.5, "safeguard": "backtrack"},
        "server_momentum and safeguard do not combine (momentum would carry a rejected step on); pass one of them",
    ),
    (
        "fedavg-exact",
        "fedavg",
        {"local_solver": "cg"},
        "algorithm=fedavg takes K local steps (local_solver=steps); for exact local solves use algorithm one-shot or fedprox",
    ),
    (
        "feddyn-mu",
        "feddyn",
        {"mu": 0.0},
        "algorithm=feddyn needs mu above 0, its regulariser alpha (the server step divides by it); e.g. mu=0.01",
    ),
    (
        "radius-exact",
        "dane",
        {"trust_radius": 1.0, "local_solver": "cg"},
        "trust_radius bounds the local steps of local_solver=steps; lbfgs and cg solve the unbounded problem: drop trust_radius or use local_solver=steps",
    ),
    (
        "scaffold",
        "scaffold",
        {"local_solver": "cg"},
        "algorithm=scaffold takes K local steps (local_solver=steps); its control update is defined by them",
    ),
    (
        "sdane-mu",
        "sdane",
        {"mu": 0.0},
        "algorithm=sdane needs mu above 0, its proximal strength lam (the step on the prox-centre is 1 / lam); e.g. mu=0.1",
    ),
    (
        "fedexp-and-lr",
        "fedavg",
        {"server_lr_rule": "fedexp", "server_lr": 2.0},
        "server_lr_rule=fedexp chooses the server step itself; drop server_lr or use server_lr_rule=fixed",
    ),
    (
        "clip-exact",
        "dane",
        {"local_clip": 1.0, "local_solver": "cg"},
        "local_clip clips the steps of local_solver=steps; cg solves the local problem exactly: drop local_clip or use local_solver=steps",
    ),
    (
        "unknown-solver",
        "dane",
        {"local_solver": "newton"},
        "unknown local_solver (--local-solver) 'newton'; choose one of: steps, lbfgs, cg",
    ),
]


@pytest.mark.parametrize(("case", "algorithm", "settings", "message"), REFUSALS,
                         ids=[case[0] for case in REFUSALS])  # fmt: skip
def test_each_refusal_reads_exactly_as_written(case, algorithm, settings, message):
    with pytest.raises(SettingError) as refused:
        make_strategy(algorithm, {**DEFAULTS, **settings})
    assert str(refused.value) == message


# The registered algorithms that need a setting beyond the defaults (refused above without it).
NEEDS = {"sdane": {"mu": 0.1}, "sdane-adaptive": {"mu": 0.1}}


def test_the_algorithms_that_need_more_are_registered():
    assert set(NEEDS) <= set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_the_defaults_alone_are_refused_by_no_algorithm_that_needs_nothing_more(algorithm):
    needs = NEEDS.get(algorithm, {})
    if needs:
        with pytest.raises(SettingError, match=f"algorithm={algorithm} needs"):
            make_strategy(algorithm, DEFAULTS)

    make_strategy(algorithm, {**DEFAULTS, **needs})
