"""What a full pass's chunk costs in activation memory: the bytes autograd keeps per input row
of a model, measured on a forward pass of 2 and 3 real rows (objective.py sizes its full-pass
chunks by it).

Not on the meta device, although that would cost no arithmetic: meta kernels import
torch._dynamo, torch.fx's symbolic shapes and sympy, about 75 MiB of RSS in every worker,
more than a streamed shard's whole cache (issue 36). Three rows cost microseconds."""

from __future__ import annotations

import torch
from torch import nn

from ....datasets.rows.features import Features
from ....models.flat import forward_flat
from .worker_state import WORKER


def activation_bytes_per_row(model: nn.Module, x: Features, num_params: int) -> int:
    """Bytes that autograd keeps per input row, measured once on 2 and 3 rows."""
    key = (id(model), tuple(x.shape[1:]), x.dtype)
    known = WORKER.activation_bytes  # worker_state.py: kept for the process's life
    if key not in known:
        # 2 and 3 rows, not 1: BatchNorm in training mode refuses a batch of one.
        saved = [_saved_bytes(model, x, num_params, rows) for rows in (2, 3)]
        known[key] = saved[1] - saved[0]  # the weights, also saved, cancel out
    return known[key]


def _saved_bytes(model: nn.Module, x: torch.Tensor, num_params: int, rows: int) -> int:
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    w = torch.zeros(num_params, dtype=x.dtype, device=x.device, requires_grad=True)
    batch = torch.zeros((rows, *x.shape[1:]), dtype=x.dtype, device=x.device)
    # Stand-ins: the module may live on the meta device (shards.architecture), and a BatchNorm
    # in training mode would update the module's own running statistics.
    buffers = {name: torch.zeros_like(b, device=x.device) for name, b in model.named_buffers()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward_flat(model, w, batch, buffers)
    return total
