"""A shard on its worker: its rows as tensors where they are computed on, and its objective.

Pure torch, no Dask: tasks.load_shard builds a ShardData on the worker the shard is pinned
to, and every round's task on that shard turns it into a ShardObjective here.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from dataclasses import dataclass
from typing import Any

import torch

from ..models.flat import Buffers
from ..models.registry import ModelSpec, build_model
from .augment import parse_augment
from .objective import ShardObjective


@dataclass(frozen=True, kw_only=True)
class ShardData:
    """A shard's rows as tensors, normalised and in the run's dtype; lives on one worker."""

    index: int
    x: torch.Tensor
    y: torch.Tensor
    task: str


def resolve_device(name: str) -> torch.device:
    """config.device on this process: auto is the current GPU if torch sees one, else CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"--device cuda, but the worker on {socket.gethostname()} sees no GPU; use "
            "--device cpu or auto"
        )
    return torch.device(name)


def to_device(value: Any, device: torch.device) -> Any:
    """Tensors (also inside dicts and state dataclasses) moved to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return dataclasses.replace(
            value, **{f.name: to_device(getattr(value, f.name), device) for f in fields}
        )
    return value


def make_objective(
    spec: ModelSpec, shard: ShardData, buffers: Buffers | None = None, seed: int = 0
) -> ShardObjective:
    """f_i of `shard` under the model `spec` describes (its L2 penalty included).

    `buffers` (the round's running statistics, if the model has any) are copied: the shard's
    local steps update its own copy. `seed` seeds the objective's draws (objective.py).
    """
    own = {name: value.to(shard.x.device, copy=True) for name, value in (buffers or {}).items()}
    return ShardObjective(
        architecture(spec),
        shard.x,
        shard.y,
        shard.task,
        l2=spec.l2,
        buffers=own,
        train_batch=spec.train_batch,
        augmentation=parse_augment(spec.augment),
        seed=seed,
    )


_MODELS = threading.local()


def architecture(spec: ModelSpec) -> torch.nn.Module:
    """The model's module for `spec`, built once per thread.

    It only supplies the architecture: weights come from the flat vector through
    functional_call, so it lives on the meta device at no memory cost. functional_call swaps
    the module's parameters while it runs, hence one module per thread, never shared.
    """
    cache = _MODELS.__dict__.setdefault("by_spec", {})
    if spec not in cache:
        with torch.device("meta"):
            cache[spec] = build_model(spec)
    return cache[spec]
