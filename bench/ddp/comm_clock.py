"""How long a DDP step waits on its all-reduce: a comm hook that times each bucket's
all-reduce (CommClock), for the ranks of rank.py."""

from __future__ import annotations

import time
import typing
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class CommClock:
    """Launch and completion marks of the all-reduces DDP runs in one step (the hook's state).

    Marks are perf_counter() on CPU, and CUDA events on GPU, where a future's callback may run
    once the work is queued rather than done; events place both marks on the GPU's timeline.
    """

    def __init__(self, *, cuda: bool) -> None:
        self.cuda = cuda
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.starts: list[Any] = []
        self.ends: list[Any] = []

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def exposed(self) -> float:
        """Seconds from the last bucket's launch to the last completion (after a sync).

        The last bucket launches when backward's compute ends, so this is the time the step
        waits on communication: the transfer, plus waiting for a slower rank to get there.
        DDP puts the last layers' gradients in a first, small bucket (1 MiB) that overlaps
        the rest of backward: lenet has 2 buckets, small-cnn 1.
        """
        return self._between(self.starts[-1], self.ends[-1]) if self.starts else 0.0

    def span(self) -> float:
        """Seconds from the first launch to the last completion: overlapped compute included."""
        return self._between(self.starts[0], self.ends[-1]) if self.starts else 0.0

    def _between(self, start: Any, end: Any) -> float:
        # Launches are appended in launch order and completions in completion order.
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


def timed_allreduce_hook(
    clock: CommClock, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (mean) of one gradient bucket, marked at launch and completion."""
    clock.calls += 1
    clock.starts.append(clock.mark())

    def done(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        clock.ends.append(clock.mark())
        return future.value()

    return default_hooks.allreduce_hook(None, bucket).then(done)


# DDP checks a hook's annotations as objects, and `from __future__ import annotations` leaves
# them as strings: resolve them.
timed_allreduce_hook.__annotations__ = typing.get_type_hints(timed_allreduce_hook)
