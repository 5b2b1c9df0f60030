"""`dane bench local-step`: the worker's local step beside a plain PyTorch loop, in one process.

Two loops train shard 0 of a store for K steps of B rows, at `torch.set_num_threads(threads)`:
- the engine: round 1's local phase of FedAvg as a worker runs it (tasks.run_local: the shard's
  objective made, the strategy's `local`, K steps of the local solver, the report back);
- plain PyTorch: the same nn.Module holding the same initial weights, the same rows in the
  same order, the same optimizer: rows held converted (a float TensorDataset's), the step's
  row indices drawn before the loop (as a DataLoader's sampler draws an epoch's order).
Each runs once to warm up, then `repeats` times, the order alternating; ms a row is a run's
seconds over K B. Both train the same thing: their final weights are compared. One more run
of each under cProfile gives the engine's top costs and what it adds to the plain loop's
(profile.py).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from ...datasets.raw import SourceOptions
from ...models.flat import flatten_parameters, load_state
from ...models.registry import build_model
from ...pipeline.engine.plan import RunSetup
from ...pipeline.engine.round.objective import derived_seed
from ...pipeline.engine.round.shards import ShardData
from ...pipeline.engine.round.tasks import run_local
from ...pipeline.engine.run.run_state import RunState, round_start
from ...pipeline.setup.config import RunConfig
from ...pipeline.setup.run_setup import prepare_run, prepare_store
from .profile import compared_profiles

# --optimizer: (the local solver's --local-optimizer, its momentum). sgd-momentum is the
# FedAvg recipe's (presets/replays/fashion-mnist-race.toml: lr 0.05, momentum 0.9, unclipped).
OPTIMIZERS = {"sgd-momentum": ("sgd", 0.9), "sgd": ("sgd", 0.0), "adam": ("adam", 0.0)}
LOOPS = ("engine", "plain")
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@dataclass(frozen=True, kw_only=True)
class LocalStepSpec:
    """One local-step benchmark; see `dane bench local-step --help`."""

    store: str
    model: str = "compact-cnn"
    batch_size: int = 64
    steps: int = 50
    optimizer: str = "sgd-momentum"
    lr: float = 0.05
    clip: float = 0.0
    repeats: int = 3
    threads: int = 1
    seed: int = 0

    def validate(self) -> LocalStepSpec:
        for flag, value in (("--batch-size", self.batch_size), ("--steps", self.steps),
                            ("--repeats", self.repeats), ("--threads", self.threads)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{flag} must be at least 1 (got {value})")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"--optimizer is one of {', '.join(OPTIMIZERS)} (got {self.optimizer!r})"
            )
        if not self.lr > 0 or not self.clip >= 0:
            raise ValueError(f"--lr must be above 0 and --clip at least 0 (got {self.lr}, "
                             f"{self.clip})")  # fmt: skip
        return self

    def run_config(self) -> RunConfig:
        """The FedAvg run whose round 1 the engine's loop takes on shard 0."""
        local_optimizer, momentum = OPTIMIZERS[self.optimizer]
        return RunConfig(
            store=self.store, model=self.model, algorithm="fedavg", local_steps=self.steps,
            batch_size=self.batch_size, local_lr=self.lr, local_optimizer=local_optimizer,
            momentum=momentum, local_clip=self.clip, seed=self.seed, rounds=1, val_fraction=0.0,
        ).validate()  # fmt: skip


def default_store(workdir: Path) -> tuple[str, str]:
    """The 2-shard Fashion-MNIST store of the 2-worker race where its files are installed,
    else the digits (written once under `workdir`); with the model that fits it."""
    installed = FASHION_MNIST.is_dir()
    source = "fashion-mnist" if installed else "digits"
    path = workdir / f"{source}-2.zarr"
    store = prepare_store(source, path, shards=2, seed=0, options=SourceOptions(seed=0))
    return str(store), "compact-cnn" if installed else "small-cnn"


def engine_loop(setup: RunSetup, state: RunState, shard: ShardData) -> Callable[[], torch.Tensor]:
    """Shard 0's local phase of round 1 as a worker runs it; gives the solution's weights."""
    round_input, opening = round_start(setup, state, ["local"] * setup.store.num_shards)
    kept = state.shard_states[0] if state.shard_states else None

    def engine() -> torch.Tensor:
        report = run_local(round_input, 0, shard, state.weights, opening, None, kept)
        return report.output.tensors["weights"]

    return engine


def engine_rows(num_rows: int, spec: LocalStepSpec) -> list[torch.Tensor]:
    """Each step's rows as the engine draws them on shard 0 in round 1: from run_local's
    generator, a permutation's first B a step (ShardObjective.sample_rows); the weights'
    equality checks that they are the same rows."""
    rng = torch.Generator().manual_seed(derived_seed(spec.seed, 1, 0))
    size = min(spec.batch_size, num_rows)
    return [torch.randperm(num_rows, generator=rng)[:size] for _ in range(spec.steps)]


def plain_loop(
    setup: RunSetup, state: RunState, shard: ShardData, spec: LocalStepSpec
) -> Callable[[], torch.Tensor]:
    """The same training in plain PyTorch: module, optimizer, loss.backward(); gives the
    module's parameters, flattened, after the K steps."""
    x, y = shard.x.dense(), shard.y  # converted once, as a TensorDataset holds them
    batches = engine_rows(len(y), spec)
    model = build_model(setup.spec)
    solver = setup.strategy.solver  # type: ignore[attr-defined]
    lr, l2 = solver.lr(1), setup.spec.l2

    def plain() -> torch.Tensor:
        load_state(model, state.weights, state.buffers).train()
        params = list(model.parameters())
        if solver.local_optimizer == "adam":
            opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=lr)
        else:
            opt = torch.optim.SGD(params, lr=lr, momentum=solver.momentum)
        for rows in batches:
            opt.zero_grad()
            out = model(x[rows])
            if shard.task == "classification":
                loss = F.cross_entropy(out, y[rows])
            else:
                loss = F.mse_loss(out.reshape(y[rows].shape), y[rows])
            if l2:
                loss = loss + l2 * sum(p.pow(2).sum() for p in params)
            loss.backward()
            if spec.clip:
                _clip(params, spec.clip)
            opt.step()
        return flatten_parameters(model)

    return plain


def _clip(params: list[torch.Tensor], clip: float) -> None:
    """The gradient scaled to norm `clip` where longer, its norm over all parameters as one
    vector (clip_grad_norm_ adds per-tensor norms: other bits than the engine's flat norm)."""
    norm = float(torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in params])))
    if norm > clip:
        for param in params:
            param.grad.mul_(clip / norm)


def run_local_step(spec: LocalStepSpec, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Both loops, timed alternately in this process, their weights compared, the engine
    profiled; JSON-able."""
    spec = spec.validate()
    threads, load = torch.get_num_threads(), [os.getloadavg()[0]]
    torch.set_num_threads(spec.threads)
    try:
        setup = prepare_run(spec.run_config())
        state, shard = RunState.fresh(setup), setup.load_train(0)
        loops = {
            "engine": engine_loop(setup, state, shard),
            "plain": plain_loop(setup, state, shard, spec),
        }
        weights = {name: loop() for name, loop in loops.items()}  # the warm-up runs
        seconds: dict[str, list[float]] = {name: [] for name in LOOPS}
        for repeat in range(spec.repeats):
            for name in LOOPS if repeat % 2 == 0 else LOOPS[::-1]:
                started = time.perf_counter()
                weights[name] = loops[name]()
                seconds[name].append(time.perf_counter() - started)
            log(f"repeat {repeat + 1}: engine {seconds['engine'][-1]:.3f} s, "
                f"plain {seconds['plain'][-1]:.3f} s")  # fmt: skip
        profile = compared_profiles(loops["engine"], loops["plain"], spec.steps)
    finally:
        torch.set_num_threads(threads)
    rows = spec.steps * min(spec.batch_size, len(shard.y))
    load.append(os.getloadavg()[0])
    return summary(spec, setup.store.source, rows, seconds, weights, profile, load)


def summary(
    spec: LocalStepSpec,
    source: str,
    rows: int,
    seconds: dict[str, list[float]],
    weights: dict[str, torch.Tensor],
    profile: dict[str, Any],
    load: list[float] | None = None,
) -> dict[str, Any]:
    """The result: ms a row of each loop (median over repeats), their ratio, the weights
    (`rows`: a run's, K B; `load`: the machine's 1-minute load average before and after)."""
    loops = {
        name: {
            "ms_per_row": statistics.median(seconds[name]) * 1e3 / rows,
            # The fastest run: the least disturbed by other work on the machine.
            "best_ms_per_row": min(seconds[name]) * 1e3 / rows,
            "runs_ms_per_row": [s * 1e3 / rows for s in seconds[name]],
        }
        for name in LOOPS
    }
    pairs = [e / p for e, p in zip(seconds["engine"], seconds["plain"], strict=True)]
    difference = (weights["engine"] - weights["plain"]).abs().max()
    return {
        "spec": asdict(spec),
        "store_source": source,
        "rows_per_run": rows,
        "loops": loops,
        "ratio": loops["engine"]["ms_per_row"] / loops["plain"]["ms_per_row"],
        "best_ratio": loops["engine"]["best_ms_per_row"] / loops["plain"]["best_ms_per_row"],
        "repeat_ratios": pairs,  # each repeat's two runs, taken one after the other
        "weights": {
            "identical": bool(torch.equal(weights["engine"], weights["plain"])),
            "max_abs_diff": float(difference),
            "count": int(weights["engine"].numel()),
        },
        "profile": profile,
        "load_average": load,
    }
