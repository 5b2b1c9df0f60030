"""Options shown to act where they are documented to (issue 24): each one through the run's
settings, checked against numpy or against the started cluster itself.

- `--local-clip` with mu > 0: the clip applies to the whole local gradient, the proximal
  and linear terms included (local_solver.py), and it binds here;
- `--local-optimizer adam`: torch's Adam against a hand-written one;
- `--threads-per-worker`, work stealing off and the allocator variables (cluster.py's
  CLUSTER_CONFIG) on a started cluster's workers and scheduler;
- the embedded default store: prepared once, then reused untouched.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from run_configs import BY_HAND, run_config

from dask_dane.pipeline.engine.reference import run_reference
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import ensure_default_store, initial_weights, prepare_run

L2, LR = 0.02, 0.05


# A batch of 64 covers each 30-row shard (all of it: no validation split, BY_HAND): every
# local step is a full-shard step.
SETTINGS = {**BY_HAND, "batch_size": 64, "rounds": 1, "local_lr": LR, "momentum": 0.0}


def _shards(info) -> list[tuple[np.ndarray, np.ndarray]]:
    group = zarr.open_group(info.path, mode="r")
    x, y = group["train/x"][:], group["train/y"][:]
    return [(x[a:b], y[a:b]) for a, b in info.shards]


def _grad(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> np.ndarray:
    return 2 * x.T @ (x @ v - y) / len(x) + 2 * L2 * v


def _clipped_dane(shards, w: np.ndarray, clip: float, mu: float, steps: int) -> np.ndarray:
    local = [_grad(x, y, w) for x, y in shards]
    g = np.mean(local, axis=0)  # equal shards
    solutions = []
    for (x, y), g_i in zip(shards, local, strict=True):
        v = w.copy()
        for _ in range(steps):
            grad_h = _grad(x, y, v) - (g_i - g) + mu * (v - w)  # eta = 1
            norm = np.linalg.norm(grad_h)
            if clip and norm > clip:
                grad_h = grad_h * (clip / norm)
            v = v - LR * grad_h
        solutions.append(v)
    return np.mean(solutions, axis=0)


def test_the_local_clip_bounds_the_whole_local_gradient_with_mu_above_zero(small_least_squares):
    shards, mu, steps = _shards(small_least_squares), 0.5, 3
    base = run_config(small_least_squares, SETTINGS, algorithm="dane", mu=mu, local_steps=steps)
    w = initial_weights(prepare_run(base).spec, base.seed).numpy()
    # At v = w the local gradient is g itself: a clip of half its norm binds on every step.
    clip = 0.5 * np.linalg.norm(np.mean([_grad(x, y, w) for x, y in shards], axis=0))
    config = run_config(small_least_squares, SETTINGS, algorithm="dane", mu=mu,
                        local_steps=steps, local_clip=float(clip))  # fmt: skip

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    expected = _clipped_dane(shards, w, clip, mu, steps)
    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-12, atol=1e-14)
    unclipped = _clipped_dane(shards, w, 0.0, mu, steps)
    assert np.max(np.abs(expected - unclipped)) > 1e-3  # the clip changed the answer


def _adam_fedavg(shards, w: np.ndarray, steps: int) -> np.ndarray:
    """torch.optim.Adam's defaults (betas 0.9, 0.999, eps 1e-8), bias-corrected, per shard."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    solutions = []
    for x, y in shards:
        v, first, second = w.copy(), np.zeros_like(w), np.zeros_like(w)
        for t in range(1, steps + 1):
            grad = _grad(x, y, v)
            first = beta1 * first + (1 - beta1) * grad
            second = beta2 * second + (1 - beta2) * grad**2
            corrected = first / (1 - beta1**t), second / (1 - beta2**t)
            v = v - LR * corrected[0] / (np.sqrt(corrected[1]) + eps)
        solutions.append(v)
    return np.mean(solutions, axis=0)


def test_the_adam_local_optimizer_is_adam(small_least_squares):
    config = run_config(small_least_squares, SETTINGS, algorithm="fedavg", local_steps=4,
                        local_optimizer="adam")  # fmt: skip
    w = initial_weights(prepare_run(config).spec, config.seed).numpy()

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    expected = _adam_fedavg(_shards(small_least_squares), w, 4)
    np.testing.assert_allclose(run.weights.numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.cluster
def test_a_started_cluster_has_the_threads_no_stealing_and_the_allocator_settings():
    import torch

    from dask_dane.pipeline.launchers.cluster import CLUSTER_CONFIG, make_client

    config = RunConfig(workers=1, threads_per_worker=2, dashboard_address="127.0.0.1:0")
    with make_client(config) as client:
        assert list(client.nthreads().values()) == [2]
        assert list(client.run(torch.get_num_threads).values()) == [2]
        environ = client.run(
            lambda: {
                k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
            }
        )
        extensions = client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.extensions))
    prefix = "distributed.nanny.pre-spawn-environ."
    expected = {k[len(prefix) :]: str(v) for k, v in CLUSTER_CONFIG.items() if k.startswith(prefix)}
    assert list(environ.values()) == [expected]
    assert "stealing" not in extensions  # work stealing off: a shard's task never moves


def test_the_default_store_is_prepared_once_and_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("DANE_CACHE", str(tmp_path / "cache"))
    config = RunConfig(workers=2, seed=0)

    first = ensure_default_store(config)
    marker = first / "left-by-the-first-call"
    marker.write_text("x")
    written = {p: p.stat().st_mtime_ns for p in first.rglob("*") if p.is_file()}
    second = ensure_default_store(config)

    assert second == first and marker.exists()
    assert {p: p.stat().st_mtime_ns for p in second.rglob("*") if p.is_file()} == written
    assert ensure_default_store(RunConfig(workers=3, seed=0)) != first  # one per layout


def test_local_theta_stops_the_solves_early_and_each_round_reports_its_steps(
    small_least_squares, monkeypatch
):
    # InexactDANE's rule with a loose theta: the solves stop after a few of their 40 steps,
    # and the row reports how many (beside FedExP's step, which shares the metrics).
    from dask_dane.pipeline.algorithms.parts import server

    seen, original = [], server.ServerStep.scale

    def spy(self, metrics, weights, proposal):
        scale = original(self, metrics, weights, proposal)
        seen.append((metrics[server.UPDATE_SQUARED], scale))
        return scale

    monkeypatch.setattr(server.ServerStep, "scale", spy)
    config = run_config(small_least_squares, SETTINGS, algorithm="dane", local_steps=40,
                        local_theta=0.5, server_lr_rule="fedexp", rounds=2,
                        diagnostics_every=1)  # fmt: skip

    run = run_reference(prepare_run(config), rounds=2, num_workers=2)

    steps = [row["local_steps"] for row in run.history]
    assert all(1 <= s < 40 for s in steps), steps
    # FedExP's step read this round's ||v_i - w||^2 averaged over the (equal) shards: the
    # solves' own step norms, which each row's shard diagnostics report independently.
    assert [row["server_lr"] for row in run.history] == [scale for _, scale in seen]
    for row, (update_squared, _) in zip(run.history, seen, strict=True):
        norms = [shard["step_norm"] ** 2 for shard in row["shards"]]
        assert update_squared == pytest.approx(np.mean(norms), rel=1e-9)


def test_an_exact_solve_counts_every_pass_over_its_shard_as_images(small_least_squares):
    # cg reads the whole 30-row shard once per value, gradient or Hessian product: a round's
    # images are whole passes, and a solve to 1e-10 takes several.
    config = run_config(
        small_least_squares, SETTINGS, algorithm="fedprox", mu=0.1, local_solver="cg"
    )

    run = run_reference(prepare_run(config), rounds=1, num_workers=2)

    images = run.history[0]["images"]
    assert images % 30 == 0 and images >= 3 * 3 * 30, images
