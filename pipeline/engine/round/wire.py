"""How our dataclasses cross a Dask comm, each tensor in them as its own out-of-band frame, and
the sizes Dask counts for them.

Pickled whole, a frozen dataclass holding tensors (a RoundResult, a WorkerPhase, a Partial)
carries them in-band: torch pickles each tensor's storage with torch.save into a bytes
object inside the pickle (a copy, with zip overhead), and distributed's own torch
serializer only applies to a tensor at the top level of a task's result or in a plain list
or dict. Registered here with distributed's "dask" serialization family, such a dataclass
is pickled (cloudpickle, as distributed's fallback would) with every tensor anywhere inside
it, in nested dataclasses, dicts, lists, tuples or a strategy's state, replaced by a
reference to an out-of-band pickle-5 buffer: the tensor's own bytes, with no copy where the
tensor is a contiguous CPU one. Those buffers are the comm's frames; on arrival the tensor
is a view of its frame where the frame is writable and starts on a 64-byte boundary, as
torch's own allocations do, else a copy that does (features.ALIGNMENT): a frame starts where
its message put it (seen at 24, 32, 40 and 56 mod 64), and left there, tensors made a float64
DANE run end 5.6e-17 off the reference in the rare run whose frames landed 8 bytes past one.

A tensor arrives on the CPU, contiguous, with its dtype (bfloat16 included: its bytes travel
as bytes) and shape; a non-contiguous one sends its elements, not its whole storage. A CUDA
tensor is copied to the host for its frame and moved back to the same device name on
arrival, as torch's own pickling restores it. Nothing registered here touches torch.Tensor
itself: torch.save checkpoints and plain pickle are unchanged.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import sys
from typing import Any

import cloudpickle
import numpy as np
import torch
from dask.sizeof import sizeof
from distributed.protocol import dask_deserialize, dask_serialize

from ....datasets.rows.features import ALIGNMENT, FeatureRows, on_boundary
from ..protocol import LocalOutput
from .aggregate import Partial
from .worker_state import WORKER


def use_frames(on: bool) -> bool:
    """Send the registered dataclasses' tensors as frames (True) or in-band as torch pickles
    them (False, the form before frames), in this process; returns the previous setting."""
    previous = WORKER.frames  # worker_state.py: benchmarks turn it off, the engine never
    WORKER.frames = bool(on)
    return previous


def _sendable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.layout == torch.strided
        and not tensor.is_quantized
        and tensor.device.type != "meta"
    )


def _tensor_reduce(tensor: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
    """The tensor as a rebuild call on its bytes, which pickle 5 sends out-of-band."""
    flat = tensor.detach().resolve_conj().resolve_neg()
    flat = flat.to("cpu").contiguous().reshape(-1)  # each a no-op for a contiguous CPU tensor
    raw = flat.view(torch.uint8).numpy()  # the bytes, shared with the tensor (bfloat16 too)
    dtype = str(tensor.dtype).removeprefix("torch.")
    args = (pickle.PickleBuffer(raw), dtype, tuple(tensor.shape), str(tensor.device))
    return _tensor_from_frame, (*args, tensor.requires_grad)


def _tensor_from_frame(
    frame: Any, dtype: str, shape: tuple[int, ...], device: str, requires_grad: bool
) -> torch.Tensor:
    """A tensor on its frame's bytes: a view of them where they are writable and start on an
    ALIGNMENT boundary, else a copy in memory of torch's own (which starts on one). Bound for
    a GPU, the bytes need only suit the dtype: the copy to the device is the tensor."""
    kind = getattr(torch, dtype)
    data = memoryview(frame).cast("B")
    if data.nbytes == 0:
        raw = torch.empty(0, dtype=torch.uint8)
    elif data.readonly:  # torch's own memory, on a boundary
        raw = torch.empty(data.nbytes, dtype=torch.uint8)
        raw.numpy()[:] = np.frombuffer(data, dtype=np.uint8)
    else:
        raw = torch.frombuffer(data, dtype=torch.uint8)
    tensor = on_boundary(raw, ALIGNMENT if device == "cpu" else kind.itemsize)
    tensor = tensor.view(kind).reshape(shape)
    if device != "cpu":
        tensor = tensor.to(device)
    return tensor.requires_grad_(True) if requires_grad else tensor


class _FramePickler(cloudpickle.Pickler):
    """cloudpickle, with every plain strided tensor sent as an out-of-band buffer."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and _sendable(obj):
            return _tensor_reduce(obj)
        return super().reducer_override(obj)


def to_frames(obj: object) -> tuple[dict[str, Any], list[memoryview | bytes]]:
    """`obj` pickled, and each tensor in it as its own frame after the pickle's."""
    if not WORKER.frames:
        raise NotImplementedError  # distributed falls back to its pickle family
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _FramePickler(stream, protocol=5, buffer_callback=buffers.append).dump(obj)
    frames: list[memoryview | bytes] = [stream.getvalue(), *(b.raw() for b in buffers)]
    return {"tensor-frames": len(buffers)}, frames


def from_frames(header: dict[str, Any], frames: list[Any]) -> Any:
    """to_frames' inverse."""
    return pickle.loads(frames[0], buffers=frames[1:])


# Dask's size estimates for what the pipeline moves: torch tensors and our dataclasses.
#
# Dask sizes unknown objects with sys.getsizeof, which is 80 bytes for any torch tensor and a
# few dozen for a dataclass holding megabytes of tensors. Its memory accounting (the
# dashboard's worker memory, spilling decisions) and its transfer logs (which the scaling
# benchmark compares with the pipeline's comm_bytes) would then be off by orders of
# magnitude. Importing this module registers the true sizes; tasks.py imports it, so every
# process that runs or submits pipeline tasks has them. register_dataclasses registers a
# dataclass's size and its wire form (above: its tensors as out-of-band frames) together, in
# the same processes.
@sizeof.register(torch.Tensor)
def _tensor_size(tensor: torch.Tensor) -> int:
    return sys.getsizeof(tensor) + tensor.element_size() * tensor.nelement()


@sizeof.register(FeatureRows)
def _stored_rows_size(rows: FeatureRows) -> int:
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
    (and their subclasses') with to_frames."""
    for cls in classes:
        sizeof.register(cls)(_dataclass_size)
        dask_serialize.register(cls)(to_frames)
        dask_deserialize.register(cls)(from_frames)


register_dataclasses(Partial, LocalOutput)
