"""What the driver fetches of a round: its row's figures every round, its weights only when
the driver must hold them (--checkpoint-every, the run's end, a new best.pt, a restart).

A round's weights, buffers and strategy state stay on the cluster otherwise: a small task of
the round's graph (`figures`, worker.stripped beside the update) sends the driver the
round's figures and whether the weights are finite, so divergence is still caught in the
round it happens. The scores of an evaluated round come one per worker; the driver adds them
(scoring.combine_scores), so no task on the cluster waits for the slowest worker's.
After a lost worker, the driver asks where the shards are now (current_placement). Where
the rounds (re)start, it sends its state (scatter_carry).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from distributed import Client, Future

from ..round import comm
from ..round.graph import RoundKeys, ShardSet
from ..round.scoring import combine_scores
from ..round.tasks import RoundResult
from ..round.worker import weights_finite
from .bounded import bounded, scheduler_checked, wait_for


@dataclass
class Taken:
    """A round on the driver (take_round): its result (with its shards' states, if any) and
    evaluation, the tensor bytes fetched, the driver's time waiting and fetching, whether the
    weights are finite, and whether the result holds them. From the figures alone, the result
    holds NO_WEIGHTS, no buffers and no state."""

    result: RoundResult
    evaluation: dict[str, float] | None
    fetched: int
    waited: dict[str, float]
    finite: bool
    weights: bool


def take_round(
    client: Client, state: Any, keys: RoundKeys, futures: dict[str, Future], timeout: float
) -> Taken:
    """A round, once done, from its keys and their futures: its update (one copy; its figures
    alone where the round built them), its scores (one per worker; none if not evaluated) and
    its last phase's outputs (the shards' states). Its weights too on a checkpoint round, or
    where the round becomes best.pt (the RunState `state`'s would_select, from its
    evaluation: the weights are taken then, while the round's keys are held)."""
    update = futures[keys.figures] if keys.figures else futures[keys.updates[0]]
    scores = [futures[k] for k in keys.evaluation]
    wanted = [update, *scores, *(futures[k] for k in keys.states)]
    started = time.perf_counter()
    wait_for(client, wanted, timeout)
    done = time.perf_counter()
    values = bounded(client, timeout, client.gather, wanted)
    waited = {"wait_s": done - started, "gather_s": time.perf_counter() - done}
    fetched = comm.payload_bytes(values)
    taken = values[0]
    result, finite = taken if isinstance(taken, tuple) else (taken, weights_finite(taken))
    outputs = values[1 + len(scores) :]
    result = with_shard_states(result, [output.shard_states for output in outputs])
    evaluation = combine_scores(*values[1 : 1 + len(scores)]) if scores else None
    weights = not keys.figures  # the round built its figures where the driver takes no weights
    if not weights and state.would_select(evaluation):
        full, more = take_update(client, keys, futures, timeout)
        result = replace(result, weights=full.weights, buffers=full.buffers, state=full.state)
        fetched, weights = fetched + more, True
    return Taken(result, evaluation, fetched, waited, finite, weights)


def with_shard_states(result: RoundResult, parts: list[dict[int, Any] | None]) -> RoundResult:
    """The round's result with its shards' states, each worker's `parts` ({shard: state})
    merged in shard order; the result itself where no part holds any."""
    merged: dict[int, Any] = {}
    for part in parts:
        merged.update(part or {})
    if not merged:
        return result
    return replace(result, shard_states=[merged[i] for i in sorted(merged)])


def take_update(
    client: Client, keys: RoundKeys, futures: dict[str, Future], timeout: float
) -> tuple[RoundResult, int]:
    """The round's update, with its weights, buffers and state, fetched from a copy on a live
    worker (each worker holds one under all-gather), and the bytes of those three. OSError
    when no copy is left: a lost worker took the only one (the run resumes from latest.pt)."""
    updates = list(dict.fromkeys(futures[k] for k in keys.updates))
    names = [future.key for future in updates]
    holders = client.sync(client.scheduler.who_has, keys=names, callback_timeout=timeout)
    live = [future for future in updates if holders.get(future.key)]
    if not live:
        raise OSError("the round's weights were lost with their worker before being fetched")
    (full,) = bounded(client, timeout, client.gather, [live[0]])
    return full, comm.payload_bytes([full.weights, full.buffers, full.state])


def current_placement(client: Client, data: ShardSet, timeout: float) -> list[str]:
    """The worker that holds each shard now (Dask reloads a lost worker's shards elsewhere).

    A shard stays with its previous worker while that worker still holds it; otherwise it is
    placed on a worker that does, so that local tasks never fetch a shard over the network.
    """
    with scheduler_checked(client, timeout):  # ClusterLost if it is the scheduler that went
        wait_for(client, data.shards, timeout)  # shards being reloaded after a worker died
        keys = [future.key for future in data.shards]
        holders = client.sync(client.scheduler.who_has, keys=keys, callback_timeout=timeout)
    placement = []
    for future, previous in zip(data.shards, data.placement, strict=True):
        where = sorted(holders.get(future.key, ()))
        placement.append(previous if previous in where or not where else where[0])
    return placement


def scatter_carry(driver: Any) -> Future:
    """What the driver sends: its state as a round's carry, once, replicated on every worker
    (a broadcast scatter), its bytes counted a copy a worker in `driver.scatter_bytes`
    (driver.Driver, for either round source)."""
    state, client = driver.state, driver.client
    carry = RoundResult(
        weights=state.weights,
        state=state.state,
        buffers=state.buffers,
        shard_states=state.shard_states,
    )
    try:
        (future,) = bounded(
            client, driver.timeout, client.scatter, [carry], hash=False, broadcast=True
        )
    except KeyError as err:
        raise OSError(f"a worker left while the round's inputs were sent ({err})") from None
    driver.scatter_bytes += comm.payload_bytes(carry) * len(set(driver.data.placement))
    return future
