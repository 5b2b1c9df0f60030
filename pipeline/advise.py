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

import math
from dataclasses import asdict, dataclass, replace
from itertools import pairwise
from typing import Any

import torch

from .algorithms.parts.noise_scale import noise_figures, ratio, shard_metrics
from .engine.round.objective import ShardObjective
from .engine.round.shards import make_objective
from .observe.progress import WARN_FROM_ROUND, noise_warning
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
    for count in workers:
        steps = 1.0 + noise_scale / (count * batch)
        speedup = single / steps
        gain = speedup / rows[-1].speedup if rows else None
        rows.append(
            WorkerRow(
                workers=count,
                batch=count * batch,
                steps=steps,
                examples=1.0 + count * batch / noise_scale,
                speedup=speedup,
                doubling_gain=gain,
                lr_linear=float(count),
                lr_sqrt=math.sqrt(count),
                lr_noise=speedup,  # eps_opt's ratio is the speed-up's expression
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


def store_cap(
    rows: list[WorkerRow], *, batch: int, train_rows: int, noise_scale: float
) -> tuple[int, str] | None:
    """The largest worker count of `rows` the store supports, and why the next one is past
    it: its step averages more rows than the store's `train_rows` (a shard would be smaller
    than a minibatch), or `dane train` would warn of the noise scale; None if all are."""
    for supported, row in pairwise(rows):
        step = row.workers * batch
        if step > train_rows:
            return supported.workers, (
                f"{row.workers} workers x --batch-size {batch} = {step} rows a step, more than "
                f"the store's {train_rows} training rows"
            )
        run = {"round": WARN_FROM_ROUND, "noise_scale_ema": noise_scale, "num_workers": row.workers}
        warned = noise_warning(run, batch)  # the run's own test, on the measured scale
        if warned is not None:
            return supported.workers, warned.removeprefix("warning: ").partition(": ")[0]
    return None


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


def measure_noise(
    objectives: list[ShardObjective],
    weights: torch.Tensor,
    *,
    batch: int,
    draws: int,
    seed: int,
    per_shard: int = 2,
) -> NoiseMeasure:
    """B_simple at `weights`: each draw takes `per_shard` disjoint minibatches of `batch` rows
    from every shard (as sync SGD draws them: training-mode forward passes), weights each by
    its shard's rows, and forms noise_scale.py's two-batch estimate; the trace and |G|^2 are
    averaged over the draws apart, then divided."""
    generator = torch.Generator().manual_seed(seed)
    figures = [_draw(objectives, weights, batch, per_shard, generator) for _ in range(draws)]
    trace = sum(f["noise_trace"] for f in figures) / draws
    grad_sq = sum(f["noise_grad_sq"] for f in figures) / draws
    return NoiseMeasure(
        noise_scale=ratio(trace, grad_sq),
        noise_trace=trace,
        noise_grad_sq=grad_sq,
        draws=draws,
        parts=per_shard * len(objectives),
        batch=batch,
    )


def _draw(
    objectives: list[ShardObjective],
    weights: torch.Tensor,
    batch: int,
    per_shard: int,
    generator: torch.Generator,
) -> dict[str, float]:
    """One draw's noise_figures: every part's gradient reduced as a round's shards are."""
    parts, gradients, shares, rows = [], [], [], 0
    for objective in objectives:
        drawn = objective.sample_rows(per_shard * batch, generator)
        size = len(drawn) // per_shard
        if size < 1:
            raise ValueError(f"a shard of {len(drawn)} rows cannot give {per_shard} minibatches")
        for part in drawn.split(size)[:per_shard]:
            gradient = _minibatch_gradient(objective, weights, part)
            share = objective.num_samples / per_shard  # its shard's weight, split evenly
            parts.append(shard_metrics(gradient, len(part), share))
            gradients.append(gradient)
            shares.append(share)
            rows += len(part)
    total = sum(shares)
    pairs = list(zip(shares, parts, strict=True))
    mean = {key: sum(share / total * part[key] for share, part in pairs) for key in parts[0]}
    mean_gradient = sum(share / total * g for share, g in zip(shares, gradients, strict=True))
    figures = noise_figures(mean, mean_gradient, rows)
    assert figures, "two parts or more always give the two-batch estimate"
    return figures


def _minibatch_gradient(
    objective: ShardObjective, weights: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """The mean loss's gradient over `rows`, as a local SGD step takes it."""
    weights = weights.detach().requires_grad_(True)
    objective.batch_loss(weights, rows).backward()
    return weights.grad.detach()


def sgd_steps(
    objectives: list[ShardObjective],
    weights: torch.Tensor,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
) -> torch.Tensor:
    """`steps` plain SGD steps from `weights`, each on a minibatch of the next shard in turn."""
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps):
        objective = objectives[step % len(objectives)]
        rows = objective.sample_rows(batch, generator)
        weights = weights - lr * _minibatch_gradient(objective, weights, rows)
    return weights.detach()


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
        Plain SGD steps before measuring. B_noise changes as training goes (on the digits
        store it fell tenfold while the loss fell fastest, then rose to five times its
        initial value near convergence): measure where training spends its time.

    Returns
    -------
    dict
        `measure` (NoiseMeasure's fields and sgd_steps), `rows` (WorkerRow's, one per worker
        count), `train_rows`, `workers_worth` (None where B_simple could not be measured) and
        `capped` (the rule's count and why the store supports fewer, or None: store_cap).
    """
    if draws < 1 or steps < 0:
        raise ValueError(
            f"--draws must be at least 1 and --steps at least 0 (got {draws}, {steps})"
        )
    if config.store is None:
        config = replace(config, store=str(ensure_default_store(config)))
    setup = prepare_run(config)
    weights, buffers = initial_state(setup.spec, config.seed)
    objectives = [
        make_objective(setup.spec, setup.load_train(i), buffers, config.seed)
        for i in range(setup.store.num_shards)
    ]
    batch = config.batch_size
    weights = sgd_steps(
        objectives, weights, steps=steps, batch=batch, lr=config.local_lr, seed=config.seed
    )
    measure = measure_noise(objectives, weights, batch=batch, draws=draws, seed=config.seed + 1)
    scale = measure.noise_scale
    rows = scaling_rows(scale, batch) if scale is not None else []
    train_rows, worth = setup.store.num_train, workers_worth(rows) if rows else None
    cap = store_cap(rows, batch=batch, train_rows=train_rows, noise_scale=scale) if rows else None
    capped = cap is not None and worth > cap[0]
    return {
        "store": config.store,
        "model": config.model,
        # sgd_steps: the plain SGD steps taken from the initial weights before measuring.
        "measure": {**asdict(measure), "sgd_steps": steps},
        "rule": f"double the workers while it cuts the steps by >= {MIN_DOUBLING_GAIN:g}x",
        "rows": [asdict(row) for row in rows],
        "train_rows": train_rows,
        "workers_worth": cap[0] if capped else worth,
        # where the store supports fewer workers than the rule gives: the rule's, and why
        "capped": {"rule_worth": worth, "why": cap[1]} if capped else None,
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
        lines.append("".join(f"{c:>{width}}" for c, width in zip(cells, widths, strict=True)))
    lines += ["", f"workers worth paying for: {advice['workers_worth']} ({advice['rule']})"]
    if advice.get("capped"):
        capped = advice["capped"]
        lines.append(f"  (the rule alone gives {capped['rule_worth']}; capped: {capped['why']})")
    return lines
