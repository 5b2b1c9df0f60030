"""What a segment of rounds (`--collective torch`) takes of the cluster and gives back: a lease
on each of its workers, its tasks settled (cancelled, and waited for until none runs), and the
workers found frozen removed from the scheduler (segments.py drives them)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from distributed import Queue, Semaphore

from .bounded import bounded, cluster_identity

# Seconds to wait for a lease that another run holds before saying so.
LOCK_NOTE_S = 2.0


def lock_workers(client: Any, workers: list[str], note: Callable[[str], None]) -> list[Semaphore]:
    """One lease a worker, taken in the addresses' order (so two runs never hold each a part
    and wait for the rest). Leases, not locks: a killed driver's lapse after Dask's
    lease-timeout (30 s), where a lock would stay held for good. `note`: the line saying a
    lease is waited for (Callbacks.on_note)."""
    locks = []
    for worker in sorted(workers):
        lock = Semaphore(
            max_leases=1,
            name=f"dane-collective-{worker}",
            scheduler_rpc=client.scheduler,
            loop=client.loop,
        )
        if not lock.acquire(timeout=LOCK_NOTE_S):
            note(
                f"dane: waiting for another run's --collective torch on {worker} to finish a "
                "segment (or start this run with --collective dask)"
            )
            lock.acquire()
        locks.append(lock)
    return locks


def release(locks: list[Semaphore], timeout: float) -> None:
    """The leases given back, in a thread waited for at most `timeout`: a frozen scheduler
    never answers, and an unreleased lease lapses after Dask's lease-timeout anyway. Never
    Semaphore.close, which would drop the semaphore under another run waiting on it."""

    def give_back() -> None:
        for lock in reversed(locks):
            with contextlib.suppress(Exception):  # the scheduler gone: the lease went too
                lock.release()

    releasing = threading.Thread(target=give_back, daemon=True)
    releasing.start()
    releasing.join(timeout)


def settle(
    client: Any, futures: list[Any], workers: list[str], *, plan: Any, timeout: float, wait: bool
) -> set[str]:
    """Cancel a segment's tasks (a running rank ends after its round: segment._cancelled)
    and with `wait` wait until none runs on its worker any more (a peer waits at most its
    group's timeout), so that the next segment's tasks do not queue behind them. Returns the
    workers that did not answer within --collective-timeout: frozen (SIGSTOP, a hung host).
    `timeout`: --timeout, what a request to the scheduler may take."""
    with contextlib.suppress(OSError):  # a frozen scheduler: the run stops on it anyway
        bounded(client, timeout, client.cancel, futures)
    keys = [future.key for future in futures]
    busy, frozen = set(workers), set()
    deadline = time.monotonic() + 2 * plan.group.timeout_s + timeout
    while wait and busy and time.monotonic() < deadline:
        # A worker the scheduler no longer lists is gone, nothing runs there: asked anyway,
        # the scheduler would retry the refused connection for Dask's connect timeout (30 s).
        busy &= _listed(client, timeout) or busy
        for worker in sorted(busy):
            try:
                running = bounded(
                    client, plan.group.timeout_s, client.run, _executing, keys,
                    workers=[worker], on_error="ignore",
                )  # fmt: skip
            except OSError:  # TimeoutError too: it did not answer
                frozen.add(worker)
                running = {}
            if not running.get(worker):
                busy.discard(worker)
        time.sleep(0.05 if busy else 0)
    with contextlib.suppress(Exception):  # the scheduler gone: nothing left to release
        Queue(plan.queue, client=client).close()
    return frozen


def _listed(client: Any, timeout: float) -> set[str]:
    """The workers the scheduler lists now (empty where it does not answer in `timeout`)."""
    try:
        info = cluster_identity(client, timeout)
    except OSError:  # TimeoutError too
        return set()
    return set(info["workers"])


def _executing(keys: list[str], dask_worker: Any = None) -> bool:
    """On a worker: whether one of these tasks still runs there (cancelled or not)."""
    return any(task.key in keys for task in dask_worker.state.executing)


async def remove_workers(addresses: list[str], dask_scheduler: Any = None) -> None:
    """On the scheduler: these workers removed, their tasks and data (the shards they held)
    rescheduled on the others."""
    for address in addresses:
        await dask_scheduler.remove_worker(address, stimulus_id=f"dane-frozen-{time.time()}")
