"""How many workers pay: the gradient noise scale, measured in one process, and the time to a
target that McCandlish et al.'s law predicts from it for m workers (`dane advise`).

The law ("An Empirical Model of Large-Batch Training", 2018): training to a fixed loss with
batch B takes steps S = S_min (1 + B_noise / B) and examples E = E_min (1 + B / B_noise).
With m workers of B rows each, a step of sync SGD averages m B rows: the steps to a target
fall by (1 + B_noise / B) / (1 + B_noise / (m B)) against one worker, nearly m-fold while
m B is well below B_noise and hardly at all once it is well above. The measured B_simple
stands for B_noise (the paper's approximation, exact for a well-conditioned Hessian).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .algorithms.parts.noise_scale import noise_figures, ratio, shard_metrics
from .round.objective import ShardObjective
from .round.shards import make_objective
from .setup.config import RunConfig
from .setup.run_setup import ensure_default_store, initial_state, prepare_run

WORKERS = (1, 2, 4, 8, 16)
# Doubling the workers is worth paying for while it cuts the steps to a target by at least
# this factor: 1.5 of an ideal 2, three quarters of the doubled cost turned into speed. Under
# the law, doubling from m to 2m gains (1 + x) / (1 + x / 2) with x = B_noise / (m B), which
# is 1.5 at x = 2: so a doubling to 2m pays while m B <= B_noise / 2, i.e. the largest m
# worth paying for is the largest with m B <= B_noise (one worker below that).
MIN_DOUBLING_GAIN = 1.5


@dataclass(frozen=True, kw_only=True)
class WorkerRow:
    """The law's prediction for `workers` of `batch` rows each (steps and examples relative
    to their minima at any batch; speedup in steps against one worker; the learning rate
    relative to one worker's by the linear and sqrt rules and by McCandlish's eps_opt)."""

    workers: int
    batch: int  # m B: the rows one step averages
    steps: float  # S / S_min
    examples: float  # E / E_min
    speedup: float  # steps of one worker / steps of m
    doubling_gain: float | None  # speedup of m / speedup of m/2 (None for the first row)
    lr_linear: float
    lr_sqrt: float
    lr_noise: float  # eps_opt(m B) / eps_opt(B), eps_opt(B) = eps_max / (1 + B_noise / B)


def scaling_rows(
    noise_scale: float, batch: int, workers: tuple[int, ...] = WORKERS
) -> list[WorkerRow]:
    """The law's table for `workers` of `batch` rows each, given B_noise = `noise_scale`."""
    rows: list[WorkerRow] = []
    single = 1.0 + noise_scale / batch
    for m in workers:
        steps = 1.0 + noise_scale / (m * batch)
        speedup = single / steps
        gain = speedup / rows[-1].speedup if rows else None
        rows.append(
            WorkerRow(
                workers=m,
                batch=m * batch,
                steps=steps,
                examples=1.0 + m * batch / noise_scale,
                speedup=speedup,
                doubling_gain=gain,
                lr_linear=float(m),
                lr_sqrt=math.sqrt(m),
                lr_noise=speedup,
            )
        )
    return rows


def workers_worth(rows: list[WorkerRow]) -> int:
    """The largest worker count reached by doublings that each gained MIN_DOUBLING_GAIN."""
    worth = rows[0].workers
    for row in rows[1:]:
        if row.doubling_gain is None or row.doubling_gain < MIN_DOUBLING_GAIN:
            break
        worth = row.workers
    return worth


@dataclass(frozen=True, kw_only=True)
class NoiseMeasure:
    """B_simple from `draws` rounds of per-part minibatch gradients, the trace and |G|^2
    averaged over the draws apart (their ratio is `noise_scale`, None if |G|^2 <= 0)."""

    noise_scale: float | None
    noise_trace: float
    noise_grad_sq: float
    draws: int
    parts: int  # minibatches of `batch` rows per draw, disjoint, over all shards
    batch: int
    sgd_steps: int  # plain SGD steps taken from the initial weights before measuring


def measure_noise(
    objectives: list[ShardObjective],
    w: torch.Tensor,
    *,
    batch: int,
    draws: int,
    seed: int,
    per_shard: int = 2,
) -> NoiseMeasure:
    """B_simple at `w`: each draw takes `per_shard` disjoint minibatches of `batch` rows from
    every shard (as sync SGD draws them: training-mode forward passes), weights each by its
    shard's rows, and forms noise_scale.py's two-batch estimate; draws are averaged."""
    generator = torch.Generator().manual_seed(seed)
    traces, grad_sqs = [], []
    for _ in range(draws):
        metrics, grads, weights, rows = [], [], [], 0
        for objective in objectives:
            drawn = objective.sample_rows(per_shard * batch, generator)
            for part in drawn.split(max(1, len(drawn) // per_shard))[:per_shard]:
                g = _minibatch_gradient(objective, w, part)
                share = objective.num_samples / per_shard
                metrics.append(shard_metrics(g, len(part), share))
                grads.append(g)
                weights.append(share)
                rows += len(part)
        total = sum(weights)
        mean = {
            k: sum(wt / total * m[k] for wt, m in zip(weights, metrics, strict=True))
            for k in metrics[0]
        }
        g = sum(wt / total * gj for wt, gj in zip(weights, grads, strict=True))
        figures = noise_figures(mean, g, rows)
        traces.append(figures["noise_trace"])
        grad_sqs.append(figures["noise_grad_sq"])
    trace, grad_sq = sum(traces) / draws, sum(grad_sqs) / draws
    return NoiseMeasure(
        noise_scale=ratio(trace, grad_sq),
        noise_trace=trace,
        noise_grad_sq=grad_sq,
        draws=draws,
        parts=len(weights),
        batch=batch,
        sgd_steps=0,
    )


def _minibatch_gradient(
    objective: ShardObjective, w: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    w = w.detach().requires_grad_(True)
    objective.batch_loss(w, rows).backward()
    return w.grad.detach()


def sgd_steps(
    objectives: list[ShardObjective],
    w: torch.Tensor,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
) -> torch.Tensor:
    """`steps` plain SGD steps from `w`, each on a minibatch of the next shard in turn."""
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        objective = objectives[step % len(objectives)]
        w = w - lr * _minibatch_gradient(objective, w, objective.sample_rows(batch, generator))
    return w.detach()


def advise(config: RunConfig, *, draws: int = 8, steps: int = 0) -> dict[str, Any]:
    """`dane advise`: B_simple for `config`'s store and model at its initial weights (after
    `steps` SGD steps at its local lr, if given), and the law's table for its batch size.

    Parameters
    ----------
    config : RunConfig
        The store (None: the embedded digits default, as `dane train`), model, batch size,
        local lr and seed.
    draws : int
        Rounds of minibatch gradients averaged into the estimate.
    steps : int
        Plain SGD steps before measuring: B_noise grows as training proceeds, so the
        initial weights' estimate (0 steps) is usually the smallest.

    Returns
    -------
    dict
        `measure` (NoiseMeasure's fields), `rows` (WorkerRow's, one per worker count) and
        `workers_worth` (None where B_simple could not be measured).
    """
    if draws < 1 or steps < 0:
        raise ValueError(
            f"--draws must be at least 1 and --steps at least 0 (got {draws}, {steps})"
        )
    if config.store is None:
        config = replace(config, store=str(ensure_default_store(config)))
    setup = prepare_run(config)
    w, buffers = initial_state(setup.spec, config.seed)
    objectives = [
        make_objective(setup.spec, setup.load_train(i), buffers, config.seed)
        for i in range(setup.store.num_shards)
    ]
    batch = config.batch_size
    w = sgd_steps(objectives, w, steps=steps, batch=batch, lr=config.local_lr, seed=config.seed)
    measure = replace(
        measure_noise(objectives, w, batch=batch, draws=draws, seed=config.seed + 1),
        sgd_steps=steps,
    )
    scale = measure.noise_scale
    rows = scaling_rows(scale, batch) if scale is not None else []
    return {
        "store": config.store,
        "model": config.model,
        "measure": asdict(measure),
        "rule": f"double the workers while it cuts the steps by >= {MIN_DOUBLING_GAIN:g}x",
        "rows": [asdict(row) for row in rows],
        "workers_worth": workers_worth(rows) if rows else None,
    }


def advice_lines(advice: dict[str, Any]) -> list[str]:
    """`dane advise`'s table, one string a line."""
    measure = advice["measure"]
    at = (
        f"after {measure['sgd_steps']} SGD steps"
        if measure["sgd_steps"]
        else "at the initial weights"
    )
    head = (
        f"{advice['model']} on {advice['store']}, {at}: {measure['draws']} draws of "
        f"{measure['parts']} minibatches of {measure['batch']} rows"
    )
    if measure["noise_scale"] is None:
        return [head, "noise scale: not measurable (|G|^2 estimate <= 0: try more --draws)"]
    lines = [head, f"noise scale B_simple = {measure['noise_scale']:.1f} rows", ""]
    header = ("workers", "m*B", "steps/S_min", "examples/E_min", "speed-up", "doubling")
    header += ("lr linear", "lr sqrt", "lr noise")
    widths = [len(name) + 2 for name in header]
    lines.append("".join(f"{name:>{width}}" for name, width in zip(header, widths, strict=True)))
    for row in advice["rows"]:
        gain = row["doubling_gain"]
        cells = (f"{row['workers']}", f"{row['batch']}", f"{row['steps']:.2f}",
                 f"{row['examples']:.2f}", f"{row['speedup']:.2f}x",
                 "" if gain is None else f"{gain:.2f}x", f"{row['lr_linear']:.2f}x",
                 f"{row['lr_sqrt']:.2f}x", f"{row['lr_noise']:.2f}x")  # fmt: skip
        lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    lines += ["", f"workers worth paying for: {advice['workers_worth']} ({advice['rule']})"]
    return lines


def write_advice(advice: dict[str, Any], path: Path) -> None:
    """The advice as JSON at `path`."""
    path.write_text(json.dumps(advice, indent=2) + "\n")
