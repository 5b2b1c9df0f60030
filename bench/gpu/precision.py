"""`dane bench precision`: one process's time per local step in fp32 and in bf16.

A local step as the workers take it (pipeline/engine/round/objective.py): a minibatch of one
shard, the loss and its gradient at the weights, an SGD update of the float32 weights. Both
precisions start from the same weights and draw the same minibatches; the first steps warm
the kernels up and are not timed. It answers whether `--precision bf16` pays on this device:
on a GPU with bfloat16 tensor cores it should; on a CPU without bfloat16 units it may cost
time.
The same fp32 steps taken by plain PyTorch (the module's own parameters, loss.backward())
give the engine's cost beside a plain step: the flat weights and functional_call should cost
next to nothing (`fp32_over_plain` near 1).

    dane bench precision --store S --model lenet --device cuda --json precision.json
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from ...pipeline.setup.config import RunConfig
from ..common.specs import option, run_defaults, spec_record

WARMUP_STEPS = 5


@dataclass(frozen=True, kw_only=True)
class PrecisionSpec:
    """One precision benchmark; see `dane bench precision --help`."""

    RUN_FLAGS: ClassVar = ("store", "model", "device", "batch_size", "local_lr", "seed")
    REQUIRED: ClassVar = ("store",)
    RUN_HELP: ClassVar = {"store": "A store of images (dane prepare ...)."}
    # The local steps' settings; its precision is set to each of fp32 and bf16 in turn.
    run: RunConfig = field(default_factory=run_defaults(model="lenet", batch_size=64))
    steps: int = option(50, help="Timed local steps a repeat.")
    repeats: int = option(3, help="Timed repeats; the median is reported.")

    def validate(self) -> PrecisionSpec:
        for name, value in (("steps", self.steps), ("batch_size", self.run.batch_size),
                            ("repeats", self.repeats)):  # fmt: skip
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
        return self


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
    step: Callable[[Any], tuple[Any, float]], w: Any, spec: PrecisionSpec, device: torch.device
) -> dict:
    """Median seconds a step over `repeats` runs of `steps` steps, after the warm-up; the
    last batch's loss. `step(w)` takes one step from w and gives (new w, its batch loss)."""
    for _ in range(WARMUP_STEPS):
        w, loss = step(w)
    runs = []
    for _ in range(spec.repeats):
        _sync(device)
        started = time.perf_counter()
        for _ in range(spec.steps):
            w, loss = step(w)
        _sync(device)
        runs.append((time.perf_counter() - started) / spec.steps)
    return {"step_s": statistics.median(runs), "runs_step_s": runs, "final_batch_loss": loss}


def _engine_steps(objective: Any, weights: torch.Tensor, spec: PrecisionSpec) -> dict:
    """The workers' local step: the loss at the flat weights, its gradient, an SGD update."""
    rng = torch.Generator().manual_seed(spec.run.seed)

    def step(w: torch.Tensor) -> tuple[torch.Tensor, float]:
        w = w.detach().requires_grad_(True)
        loss = objective.batch_loss(w, objective.sample_rows(spec.run.batch_size, rng))
        (grad,) = torch.autograd.grad(loss, w)
        return (w - spec.run.local_lr * grad).detach(), float(loss.detach())

    return _timed(step, weights.to(objective.x.device), spec, objective.x.device)


def _plain_steps(objective: Any, spec: PrecisionSpec, model_spec: Any) -> dict:
    """The same steps as plain PyTorch takes them (a DDP rank's, plain_torch.py): a module of
    its own parameters (the engine's holds none: functional_call lends it the flat weights),
    loss.backward() and an SGD update, in fp32, from the same start on the same minibatches.
    """
    from ..ddp.plain_torch import initial_model, minibatch_loss

    model = initial_model(model_spec, spec.run.seed, objective.x.device).train()
    params = list(model.parameters())
    rng = torch.Generator().manual_seed(spec.run.seed)

    def step(_: None) -> tuple[None, float]:
        rows = objective.sample_rows(spec.run.batch_size, rng)
        for param in params:
            param.grad = None
        # The objective stands for the rows: minibatch_loss reads its x, y and task.
        loss = minibatch_loss(model, objective, rows, objective.l2)
        loss.backward()
        with torch.no_grad():
            for param in params:
                param -= spec.run.local_lr * param.grad
        return None, float(loss.detach())

    return _timed(step, None, spec, objective.x.device)


def run_precision(spec: PrecisionSpec) -> dict[str, Any]:
    """fp32 then bf16 on shard 0 of the store, in this process, then the fp32 steps in plain
    PyTorch (what the engine's step costs beside a plain one); JSON-able."""
    from ...pipeline.setup.run_setup import initial_weights, prepare_run
    from ..common.training_set import shard_objectives

    spec = spec.validate()
    rows: dict[str, Any] = {}
    for precision in ("fp32", "bf16"):
        setup = prepare_run(replace(spec.run, precision=precision).validate())
        objective = shard_objectives(setup)[0]
        weights = initial_weights(setup.spec, spec.run.seed)
        rows[precision] = _engine_steps(objective, weights, spec)
        rows[precision]["device"] = str(objective.x.device)
        if precision == "fp32":
            plain = _plain_steps(objective, spec, setup.spec)
            plain["device"] = rows["fp32"]["device"]
    rows["plain"] = plain
    return {
        "spec": spec_record(spec),
        "precisions": rows,
        "bf16_over_fp32": rows["bf16"]["step_s"] / rows["fp32"]["step_s"],
        "fp32_over_plain": rows["fp32"]["step_s"] / rows["plain"]["step_s"],
    }


def precision_table(result: dict[str, Any]) -> str:
    rows = result["precisions"]
    lines = ["| precision | device | ms a step | last batch loss |", "|---|---|---:|---:|"]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['device']} | {row['step_s'] * 1e3:.2f} | "
            f"{row['final_batch_loss']:.4f} |"
        )
    lines.append(f"bf16 / fp32 time a step: {result['bf16_over_fp32']:.2f}")
    lines.append(f"the engine's fp32 step / plain PyTorch's: {result['fp32_over_plain']:.2f}")
    return "\n".join(lines)


def precision_plot(result: dict[str, Any], path: Any) -> None:
    from ...pipeline.report import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    names = list(result["precisions"])
    times = [result["precisions"][n]["step_s"] * 1e3 for n in names]
    ax.bar(names, times, color=["tab:blue", "tab:orange", "tab:gray"][: len(names)])
    spec = result["spec"]
    ax.set_ylabel("ms a local step")
    ax.set_title(f"{spec['model']}, batch {spec['batch_size']}, {spec['device']}")
    save_figure(fig, path)
