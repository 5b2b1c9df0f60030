"""Dask's size estimates for what the pipeline moves: torch tensors and our dataclasses.

Dask sizes unknown objects with sys.getsizeof, which is 80 bytes for any torch tensor and a
few dozen for a dataclass holding megabytes of tensors. Its memory accounting (the
dashboard's worker memory, spilling decisions) and its transfer logs (which the scaling
benchmark compares with the pipeline's comm_bytes) would then be off by orders of
magnitude. Importing this module registers the true sizes; tasks.py imports it, so every
process that runs or submits pipeline tasks has them. register_dataclasses also registers the
dataclasses' wire form (wire.py: their tensors as out-of-band frames), in the same processes.
"""

from __future__ import annotations

import dataclasses
import sys

import torch
from dask.sizeof import sizeof

from ..algorithms.base import LocalOutput
from .aggregate import Partial, ShardReport
from .features import StoredRows
from .streamed import StreamedRows
from .wire import register_frames


@sizeof.register(torch.Tensor)
def _tensor_size(tensor: torch.Tensor) -> int:
    return sys.getsizeof(tensor) + tensor.element_size() * tensor.nelement()


@sizeof.register(StoredRows)
@sizeof.register(StreamedRows)
def _stored_rows_size(rows: StoredRows | StreamedRows) -> int:
    # The held bytes (uint8 images count 1 byte a value; a streamed shard, its cached
    # chunks), not the converted size.
    return sys.getsizeof(rows) + rows.nbytes


def _dataclass_size(obj: object) -> int:
    return sys.getsizeof(obj) + sum(
        sizeof(getattr(obj, f.name))
        for f in dataclasses.fields(obj)  # type: ignore[arg-type]
    )


def register_dataclasses(*classes: type) -> None:
    """Size instances of these dataclasses as the sum of their fields, and send their tensors
    as out-of-band frames (wire.py)."""
    for cls in classes:
        sizeof.register(cls)(_dataclass_size)
    register_frames(*classes)


register_dataclasses(Partial, ShardReport, LocalOutput)
