"""The paper's convergence bench (DANE as the paper measures it): its synthetic-ridge source
against the paper's distribution, a small cell's measured rate against the spectral radius
through Dask, and bad grids refused before any work. The convex models and exact solves it
runs: tests/algorithms/test_convex_solves.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dask_dane.datasets.sources import SourceOptions, load_source


def test_synthetic_ridge_source_matches_the_papers_distribution():
    raw = load_source("synthetic-ridge", SourceOptions(samples=20000, seed=3))
    x, y = raw.x_train, raw.y_train

    variances = x.var(axis=0)
    residual = y - x.sum(axis=1)
    assert x.shape == (20000, 500) and x.dtype == np.float64
    assert raw.task == "regression" and raw.attrs == {"l2": 0.005}
    assert raw.x_test.shape == (4000, 500)  # test rows come on top of N
    # diag(i^-1.2): column variances follow the power law (sampling error ~ sqrt(2/N) = 1%).
    expected = np.arange(1, 501) ** -1.2
    assert np.abs(variances / expected - 1).max() < 0.06
    assert residual.var() == pytest.approx(1.0, abs=0.05)
    assert abs(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) < 0.03


# --- through Dask ---------------------------------------------------------------------------


@pytest.mark.cluster
def test_bench_cell_rate_matches_spectral_radius_and_mu_stabilises(cluster_client, tmp_path):
    # A small cell of the paper's experiment: 1000 samples on 8 machines (125 rows of d = 500
    # per shard): DANE with mu = 0 diverges, mu = 0.03 converges, at the predicted rates.
    from dask_dane.bench.convergence.run import ConvergenceSpec, run_convergence

    spec = ConvergenceSpec(
        machines=(8,),
        samples=(1000,),
        mus=(0.0, 0.03),
        rounds=20,
        seeds=1,
        workdir=str(tmp_path),
    ).validate()

    partials = []

    result = run_convergence(
        spec, client=cluster_client, log=lambda line: None, on_cell=partials.append
    )

    unstable, stable = result["cells"]
    assert unstable["spectral_radius"] > 1.5 and unstable["diverged"]
    assert stable["spectral_radius"] < 0.95 and not stable["diverged"]
    for cell in (unstable, stable):
        # The fitted rate approaches the radius from below as the slowest mode takes over
        # (neighbouring eigenvalues still contribute after 20 iterations): within 6%.
        ratio = cell["measured_rate"] / cell["spectral_radius"]
        assert 0.94 < ratio < 1.01
        assert cell["comm_rounds_per_iteration"] == 2
    curve = stable["log10_suboptimality"]
    assert curve[-1] < curve[0] - 2
    assert [len(p["cells"]) for p in partials] == [1, 2]  # written after every cell
    assert len(curve) == 21 and len(result["table"]) == 2


# --- bad input ------------------------------------------------------------------------------


def test_bench_rejects_bad_grids_before_any_work(tmp_path, monkeypatch, capsys):
    from dask_dane.cli.entry import main

    cases = {
        "--algorithms": (["--algorithms", "dane,newton"], "newton"),
        "--machines": (["--machines", "4,x"], "--machines"),
        "--local-tol": (["--local-tol", "2"], "(0, 1)"),
        "--problem": (["--problem", "lasso"], "lasso"),
    }
    for case, (args, expected) in cases.items():
        argv = ["dane", "bench", "convergence", *args, "--workdir", str(tmp_path / "w")]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            main()
        lines = capsys.readouterr().err.strip().splitlines()

        assert exit_info.value.code == 2, case
        assert len(lines) == 1 and expected in lines[0], (case, lines)
    assert list(tmp_path.iterdir()) == []
