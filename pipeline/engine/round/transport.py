"""What travels between workers, and in what encoding: `--transport float32 | bfloat16`.

Each worker sends the sums of its whole subtrees (worker.py) to every other worker (an
all-gather), and each completes the tree itself. With `bfloat16` those sums travel in bfloat16: the
tensors an algorithm averages as weights (its `weights` output, the local solutions v_i) as
their change from the round's weights, sum_i n_i (v_i - w), the others (gradients, control
variates) as they are. Every worker that completes the tree, the sender too, decodes the same
bytes back into the weights' dtype, so all hold the same sums and the reduction
accumulates in float32 (or float64); only what crosses is rounded. BatchNorm's buffers and
the metrics are a few floats and travel as they are. reference.py encodes the same subtree
sums for the placement the Dask run has, so Dask = reference holds in every mode.

Why deltas: bfloat16 keeps 8 bits of mantissa, a relative error of 2^-9 of what it encodes.
Of v_i itself that is about 0.2 % of each weight; of v_i - w it is 0.2 % of the round's step,
which is what the average is made of (DiLoCo's pseudo-gradients travel so). No error feedback
is kept: at this precision the error is unbiased rounding of a small step, and a residual
kept per worker would make a round's result depend on state outside the run's checkpoint.
`float32` sends the sums as computed, bit for bit as before this setting existed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .aggregate import Partial


TRANSPORTS = ("float32", "bfloat16")


def round_form(collective: str) -> str:
    """How a run's rounds cross, as its rows name it: `dask`, a Dask graph's all-gather, or
    `torch`, a torch.distributed group's (--collective torch). Rows written before
    2026-12-07 say `allgather` and `torch-gloo` (bench/network/model.py ALLGATHER_FORMS)."""
    return "torch" if collective == "torch" else "dask"


# An algorithm's outputs that it averages as weights (algorithms/*.py name them so): they
# travel as their change from the round's weights.
DELTA_TENSORS = frozenset({"weights"})


def _width(transport: str) -> torch.dtype:
    """The dtype a lossy transport sends in (torch imported here: settings.py reads
    TRANSPORTS without it)."""
    import torch

    return {"bfloat16": torch.bfloat16}[transport]


def is_lossless(transport: str) -> bool:
    return transport == "float32"


def encode(total: Partial, weights: torch.Tensor, transport: str) -> Partial:
    """A subtree's sum as it travels: its tensors in `transport`'s encoding."""
    if is_lossless(transport):
        return total
    n, width = total.num_samples, _width(transport)
    tensors = {k: _shift(k, t, n, weights, -1.0).to(width) for k, t in total.tensor_sums.items()}
    return replace(total, tensor_sums=tensors)


def decode(sent: Partial, weights: torch.Tensor, transport: str) -> Partial:
    """encode's inverse up to its rounding, in the weights' dtype: every worker decodes the
    same bytes to the same numbers."""
    if is_lossless(transport):
        return sent
    n, wide = sent.num_samples, weights.dtype
    tensors = {k: _shift(k, t.to(wide), n, weights, 1.0) for k, t in sent.tensor_sums.items()}
    return replace(sent, tensor_sums=tensors)


def _shift(
    name: str, tensor: torch.Tensor, n: int, weights: torch.Tensor, sign: float
) -> torch.Tensor:
    """A weights-like sum moved by sign * n w (n: its rows), others as they are."""
    if name not in DELTA_TENSORS:
        return tensor
    return tensor + sign * (n * weights.to(tensor.device, tensor.dtype))


def sent_bytes(tensors: dict[str, torch.Tensor], transport: str) -> int:
    """Bytes of these tensors on the wire in `transport`'s encoding."""
    import torch

    if is_lossless(transport):
        return sum(t.numel() * t.element_size() for t in tensors.values())
    width = torch.tensor([], dtype=_width(transport)).element_size()
    return sum(t.numel() * width for t in tensors.values())
