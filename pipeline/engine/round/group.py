"""A run's own torch.distributed group over its Dask workers (`--collective torch`).

One gloo group per segment of rounds (segment.py), built in the segment's task on every
worker and torn down when the task ends, fails or is cancelled. It is never the process's
default group and reads no environment variables: several runs and threads share a Dask
worker process, and each gets a group of its own over its own store (torchft builds its
groups the same way, a store with a prefix per attempt).

Rendezvous: rank 0 opens a TCPStore on its own interface at a port the system picks, and
hands the address to the others through a Dask Variable named by the segment; the group is
ProcessGroupGloo over that store, its device bound to the worker's own interface (the one Dask
reaches it at), so that network namespaces and multi-homed nodes use the right address.

What crosses: any picklable object, its tensors as out-of-band frames (wire.py), packed into
one uint8 buffer whose frames each start on a 64-byte boundary. All ranks' buffers arrive in
one all-gather, so every rank unpacks the same bytes; the tensors are views into the gathered
buffer, on the boundary MKL's sums need to give the reference's bits (features.on_boundary).
The exchange of a phase's sums (exchange.py) uses the group's tensor operations instead:
all-to-all, sends and receives into buffers kept per segment (`scratch`).
Every operation waits at most a stated timeout (`GroupTimeout`): a killed or frozen peer
fails the operation instead of blocking the worker for torch's default 30 minutes.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch.distributed import PrefixStore, ProcessGroupGloo, TCPStore

from ....datasets.rows.features import ALIGNMENT
from .wire import from_frames, to_frames


class GroupFailed(RuntimeError):
    """A collective of the group failed or timed out: a peer was lost, frozen or failed."""


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    """What every rank of a segment's group is told: its name (a Dask Variable carries rank
    0's store address under it), the world and the timeouts."""

    name: str
    world: int
    # Seconds an operation waits for its peers, beyond the time this rank's own work of the
    # phase took (GroupTimeout): the --collective-timeout setting.
    timeout_s: float


# A slot's header: the size of what the rank sent, padded so that its frames stay on the
# boundary.
HEADER = ALIGNMENT


def _padded(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


def pack(value: Any) -> torch.Tensor:
    """`value` as one uint8 tensor: a table of frame sizes, then each frame on a boundary."""
    _, frames = to_frames(value)
    sizes = [memoryview(f).nbytes for f in frames]
    table = struct.pack(f"<Q{len(sizes)}Q", len(sizes), *sizes)
    offsets, at = [], _padded(len(table))
    for size in sizes:
        offsets.append(at)
        at += _padded(size)
    out = torch.zeros(at, dtype=torch.uint8)
    raw = out.numpy()
    raw[: len(table)] = memoryview(table)
    for start, frame, size in zip(offsets, frames, sizes, strict=True):
        raw[start : start + size] = memoryview(frame).cast("B")
    return out


def unpack(buffer: torch.Tensor) -> Any:
    """pack's inverse; the tensors in it are views into `buffer` (which starts on a
    boundary, as each frame does within it)."""
    raw = buffer.numpy()
    (count,) = struct.unpack_from("<Q", raw, 0)
    sizes = struct.unpack_from(f"<{count}Q", raw, 8)
    at, frames = _padded(8 * (count + 1)), []
    for size in sizes:
        frames.append(memoryview(raw[at : at + size]))
        at += _padded(size)
    return from_frames({}, frames)


class Group:
    """One rank of a segment's gloo group; `close` tears it down (idempotent)."""

    def __init__(self, spec: GroupSpec, rank: int, host: str, store_address: tuple[str, int]):
        self.spec, self.rank, self._capacity, self._scratch = spec, rank, {}, {}
        wait = self._wait = timedelta(seconds=spec.timeout_s)
        address, port = store_address
        self._store = TCPStore(
            address, port, spec.world, is_master=False, timeout=wait, wait_for_workers=False
        )
        self._open(host, wait)

    @classmethod
    def hosting(cls, spec: GroupSpec, host: str) -> tuple[Group, tuple[str, int]]:
        """Rank 0: the store opened here (the port the system picks), then the group."""
        self = cls.__new__(cls)
        self.spec, self.rank, self._capacity, self._scratch = spec, 0, {}, {}
        wait = self._wait = timedelta(seconds=spec.timeout_s)
        self._store = TCPStore(
            host, 0, spec.world, is_master=True, timeout=wait, wait_for_workers=False
        )
        return self, (host, self._store.port)

    def join(self, host: str) -> None:
        """Rank 0, once the address is handed on: the group itself (waits for the others)."""
        self._open(host, timedelta(seconds=self.spec.timeout_s))

    def _open(self, host: str, wait: timedelta) -> None:
        options = ProcessGroupGloo._Options()
        options._devices = [ProcessGroupGloo.create_device(hostname=host)]
        options._timeout = wait
        store = PrefixStore(self.spec.name, self._store)
        try:
            self._group = ProcessGroupGloo(store, self.rank, self.spec.world, options)
        except RuntimeError as err:
            raise GroupFailed(f"the group {self.spec.name} did not form: {err}") from None

    def on_devices(self, device: torch.device) -> None:
        """Where every rank's shards are on a GPU (`device`, this rank's, is all-gathered):
        a NCCL group beside the gloo one, which the tensor operations on GPU tensors use, so
        that a phase's sums never leave the device. Elsewhere nothing changes."""
        types = self.allgather(device.type, tag="devices")
        if any(kind != "cuda" for kind in types):
            return
        from torch.distributed import ProcessGroupNCCL  # a CUDA build's; imported only here

        if device.index is not None:  # NCCL binds a rank to the thread's current GPU
            torch.cuda.set_device(device)
        options = ProcessGroupNCCL.Options()
        options._timeout = self._wait
        store = PrefixStore(f"{self.spec.name}-nccl", self._store)
        try:
            self._device_group = ProcessGroupNCCL(store, self.rank, self.spec.world, options)
        except RuntimeError as err:
            raise GroupFailed(f"the NCCL group {self.spec.name} did not form: {err}") from None

    def carries(self, tensor: torch.Tensor) -> bool:
        """Whether the tensor operations take tensors on `tensor`'s device as they are: CPU
        tensors through gloo, GPU tensors through the NCCL group where on_devices made one."""
        return tensor.device.type == "cpu" or "_device_group" in self.__dict__

    def _for(self, tensor: torch.Tensor) -> Any:
        return self._group if tensor.device.type == "cpu" else self._device_group

    def allgather(self, value: Any, own_seconds: float = 0.0, tag: str = "") -> list[Any]:
        """Every rank's `value`, in rank order (this rank's too, through the same bytes).

        One all-gather of a capacity agreed per `tag` (a phase's sums are about the same
        size every round); a second, at a larger capacity, only where a value outgrew it.
        Waits at most the group's timeout plus 4x `own_seconds` (this rank's own work
        before the call, a measure of how long a peer doing the same work may take)."""
        buffer = pack(value)
        self.wait_at_most(own_seconds)  # the exchange's tensor operations wait as long
        capacity = self._capacity.get(tag, 0)
        gathered, sizes = self._exchange(buffer, capacity)
        if max(sizes) > capacity:  # the first call of this tag, or a value that grew
            capacity = _padded(int(max(sizes) * 1.25) + 256)
            self._capacity[tag] = capacity
            gathered, sizes = self._exchange(buffer, capacity)
        return [unpack(gathered[r, HEADER : HEADER + size]) for r, size in enumerate(sizes)]

    def _exchange(self, buffer: torch.Tensor, capacity: int) -> tuple[torch.Tensor, list[int]]:
        """One all-gather of every rank's buffer in a slot of HEADER + capacity bytes: the
        header holds the buffer's size, the slot the buffer where it fits."""
        slot = torch.zeros(HEADER + capacity, dtype=torch.uint8)
        slot[:8].view(torch.int64)[0] = buffer.numel()
        if buffer.numel() <= capacity:
            slot[HEADER : HEADER + buffer.numel()] = buffer
        gathered = self.allgather_tensor(slot).view(self.spec.world, -1)
        sizes = [int(gathered[r, :8].view(torch.int64)[0]) for r in range(self.spec.world)]
        return gathered, sizes

    def wait_at_most(self, own_seconds: float) -> None:
        """The next operations wait at most the group's timeout plus 4x `own_seconds`."""
        self._wait = timedelta(seconds=self.spec.timeout_s + 4 * own_seconds)
        self._group.set_timeout(self._wait)

    def scratch(self, name: str, numel: int, like: torch.Tensor) -> torch.Tensor:
        """A buffer of `numel` elements of `like`'s dtype and device, kept under `name` and
        written in place round after round (grown, never shrunk, where a round needs more):
        what a phase's sums pass through, allocated once a segment."""
        held = self._scratch.get(name)
        if (
            held is None
            or held.numel() < numel
            or (held.dtype, held.device)
            != (
                like.dtype,
                like.device,
            )
        ):
            held = torch.empty(numel, dtype=like.dtype, device=like.device)
            self._scratch[name] = held
        return held[:numel]

    def alltoall(
        self, out: torch.Tensor, send: torch.Tensor, out_counts: list[int], send_counts: list[int]
    ) -> None:
        """`send`'s r-th run of send_counts[r] elements to rank r; `out` holds each rank's run
        to this one, in rank order (out_counts). A timeout is set by wait_at_most."""
        try:
            work = self._for(send).alltoall_base(out, send, out_counts, send_counts)
            work.wait(self._wait)
        except RuntimeError as err:
            raise GroupFailed(f"an all-to-all of {self.spec.name} failed: {err}") from None

    def send_and_receive(
        self, sends: dict[int, torch.Tensor], receives: dict[int, torch.Tensor]
    ) -> None:
        """Each tensor of `sends` to its rank and each of `receives` filled from its rank,
        all under way at once; a timeout is set by wait_at_most."""
        try:
            works = [self._for(t).send([t], peer, 0) for peer, t in sends.items()]
            works += [self._for(t).recv([t], peer, 0) for peer, t in receives.items()]
            for work in works:  # a point-to-point wait is given its bound explicitly
                work.wait(self._wait)
        except RuntimeError as err:
            raise GroupFailed(f"a send or receive of {self.spec.name} failed: {err}") from None

    def allreduce_tensor(self, tensor: torch.Tensor) -> None:
        """gloo's own all-reduce of `tensor`, in place: not bit-exact in the reference's
        order, so no round uses it; the benchmarks time the exchange against it."""
        try:
            self._group.allreduce([tensor]).wait()
        except RuntimeError as err:
            raise GroupFailed(f"an all-reduce of {self.spec.name} failed: {err}") from None

    def allgather_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor` (the same size on each), concatenated in rank order."""
        out = torch.empty(self.spec.world * tensor.numel(), dtype=tensor.dtype)
        try:
            self._group._allgather_base(out, tensor).wait()
        except RuntimeError as err:
            raise GroupFailed(f"an all-gather of {self.spec.name} failed: {err}") from None
        return out

    def close(self) -> None:
        """Tear the group down: its connections closed, the store too (on rank 0)."""
        device_group = self.__dict__.pop("_device_group", None)
        if device_group is not None:
            with contextlib.suppress(RuntimeError):
                device_group.shutdown()
        group = self.__dict__.pop("_group", None)
        if group is not None:
            # Already broken by a lost peer: nothing left to close.
            with contextlib.suppress(RuntimeError):
                group.shutdown()
        self.__dict__.pop("_store", None)
        self._scratch.clear()


def store_variable_name(spec: GroupSpec) -> str:
    """The Dask Variable that carries rank 0's store address to the other ranks."""
    return f"dane-group-{spec.name}"
