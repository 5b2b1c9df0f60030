"""The run's model, built once on the driver: checked, initialised, run on a batch of the store.

Its weights and buffers as built are the run's round 0 (RunSetup.weights, RunState.fresh),
and what a resumed checkpoint is held to (run_state.check_same_model); nothing else on the
driver builds it. A user's model is code of theirs: it may fail to import, not be callable,
fail when called or give outputs of the wrong shape. All of that is found here, as one
ValueError naming the problem and the fix, before a run directory is written or a cluster
is started.
"""

from __future__ import annotations

import torch

from ...models.flat import Buffers, model_state
from ...models.registry import ModelSpec, checked_model
from ...models.user import is_import_path
from ..engine.round.objective import mode_dependent

CHECK_ROWS = 2  # BatchNorm in training mode needs more than one row


def initial_model(
    spec: ModelSpec,
    batch: torch.Tensor,
    task: str,
    *,
    seed: int,
    algorithm: str,
    full_batch: bool,
    exact_solver: str | None = None,
) -> tuple[torch.Tensor, Buffers]:
    """`spec`'s model checked (models/registry.py: it fits the store, its task, convex for
    an `exact_solver`), initialised under `seed` and run on `batch` (rows as the workers hold
    them); its flat weights and buffers as initialised, before the batch ran.

    `full_batch`: the algorithm takes no minibatch steps, which running statistics need.
    ValueError unless the model takes `batch` and gives the task's outputs (BatchNorm: with
    the minibatches it needs).
    """
    torch.manual_seed(seed)  # the weights initial_state(spec, seed) gives, bit for bit
    model = checked_model(spec, task, exact_solver=exact_solver)  # import and call failures too
    initial = model_state(model)  # copies, taken before the batch moves any running statistics
    batch_dependent, _ = mode_dependent(model)
    if batch_dependent and full_batch:
        raise ValueError(
            f"model {spec.name!r} has BatchNorm, whose running statistics come from minibatch "
            f"steps, and --algorithm {algorithm} takes none; use a step-taking algorithm "
            "(dane, fedavg, sgd, ...) or a model without BatchNorm"
        )
    if batch_dependent and spec.train_batch < CHECK_ROWS:
        raise ValueError(
            f"model {spec.name!r} has BatchNorm, whose batch statistics need at least "
            f"{CHECK_ROWS} rows a batch; pass --batch-size {CHECK_ROWS} or more"
        )
    model.train(batch_dependent)  # BatchNorm's training path; anything else in eval mode
    try:
        with torch.no_grad():
            out = model(batch.to(getattr(torch, spec.dtype)))
    except Exception as err:
        raise ValueError(
            f"model {spec.name!r} fails on a batch of the store's samples of shape "
            f"{tuple(batch.shape)} ({type(err).__name__}: {_first_line(err)}); make it take "
            "(N, *sample_shape) inputs"
        ) from None
    _check_output(spec, out, task, len(batch))
    return initial


def _check_output(spec: ModelSpec, out: object, task: str, rows: int) -> None:
    if not isinstance(out, torch.Tensor):
        raise ValueError(
            f"model {spec.name!r} returns a {type(out).__name__}, not a tensor; return the "
            "logits (classification) or predictions (regression) as one tensor"
        )
    shape = tuple(out.shape)
    if task == "classification":
        expected, fits = f"({rows}, {spec.num_classes})", shape == (rows, spec.num_classes)
        what = f"one logit per class ({spec.num_classes} classes)"
    else:
        expected, fits = f"({rows},) or ({rows}, 1)", shape in ((rows,), (rows, 1))
        what = "one value per sample"
    if not fits:
        origin = "" if is_import_path(spec.name) else " (built in)"
        raise ValueError(
            f"model {spec.name!r}{origin} gives outputs of shape {shape} for {rows} samples; "
            f"the store's {task} task needs {what}, shape {expected}"
        )


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
