"""What the driver fetches of a round: its row's figures every round, its weights only when
the driver must hold them (--checkpoint-every, the run's end, a new best.pt, a restart).

A round's weights, buffers and strategy state stay on the cluster otherwise: a small task
beside the update (`stripped`) sends the driver the round's figures, the shards' states and
whether the weights are finite, so divergence is still caught in the round it happens.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch
from distributed import Client, Future

from ..round import comm
from ..round.graph import RoundKeys
from ..round.tasks import RoundResult
from .cluster import bounded, wait_for

# What a round the driver does not take the weights of holds in their place.
NO_WEIGHTS = torch.empty(0)


def weights_finite(result: RoundResult) -> bool:
    """Whether the result's weights and buffers are all finite (run where they are)."""
    return bool(torch.isfinite(result.weights).all()) and all(
        bool(torch.isfinite(b).all()) for b in result.buffers.values()
    )


def stripped(result: RoundResult) -> tuple[RoundResult, bool]:
    """On the worker: the result without its model-sized parts, and weights_finite."""
    light = replace(result, weights=NO_WEIGHTS, buffers={}, state=None)
    return light, weights_finite(result)


def checkpointed(every: int, rounds: int, t: int) -> bool:
    """Whether round t's weights come to the driver and are saved: every `every` rounds
    (--checkpoint-every), and the run's last round."""
    return t % every == 0 or t == rounds


def outputs(keys: RoundKeys, futures: dict[str, Future]) -> tuple[Future, Future | None, list]:
    """A round's update (one copy), evaluation (or None) and last phase's outputs."""
    evaluation = futures[keys.evaluation] if keys.evaluation else None
    states = [futures[k] for k in keys.last_phase if k in futures]
    return futures[keys.updates[0]], evaluation, states


def collect(
    client: Client,
    futures: tuple[Future, Future | None, list[Future]],
    timeout: float,
    weights: bool,
) -> tuple[RoundResult, dict[str, float] | None, int, dict[str, float], bool]:
    """A round's result (with its shards' states, if any) and evaluation, once done, from
    `futures` (an update, the evaluation or None, the last phase's outputs); the tensor bytes
    fetched, the driver's time waiting and fetching, and whether the weights are finite.
    Without `weights`, the result holds NO_WEIGHTS, no buffers and no state."""
    update, evaluation, states = futures
    started = time.perf_counter()
    if not weights:  # the figures alone, computed where the update is
        update = client.submit(stripped, update, key=f"stripped-{update.key}")
    wanted = [update] if evaluation is None else [update, evaluation]
    wait_for(client, [*wanted, *states], timeout)
    done = time.perf_counter()
    values = bounded(client, timeout, client.gather, [*wanted, *states])
    waited = {"wait_s": done - started, "gather_s": time.perf_counter() - done}
    fetched = comm.payload_bytes(values)
    result, finite = values[0] if not weights else (values[0], weights_finite(values[0]))
    outputs = values[len(wanted) :]
    if outputs:
        merged: dict[int, Any] = {}
        for output in outputs:
            merged.update(output.shard_states or {})
        result = replace(result, shard_states=[merged[i] for i in sorted(merged)])
    return result, values[1] if evaluation is not None else None, fetched, waited, finite


def take_round(
    client: Client, config: Any, state: Any, t: int, round_keys: tuple[RoundKeys, dict]
) -> tuple[RoundResult, dict[str, float] | None, int, dict[str, float], bool, bool]:
    """collect's figures of round t (its keys and their futures), and whether they hold its
    weights: on a checkpoint round, or where the round becomes best.pt (state.would_select,
    from its evaluation: the weights are taken then, while the round's keys are held)."""
    keys, futures = round_keys
    weights = checkpointed(config.checkpoint_every, config.rounds, t)
    result, evaluation, fetched, waited, finite = collect(
        client, outputs(keys, futures), config.timeout, weights
    )
    if not weights and state.would_select(evaluation):
        result, more = take_weights(client, keys, futures, result, config.timeout)
        fetched, weights = fetched + more, True
    return result, evaluation, fetched, waited, finite, weights


def take_weights(
    client: Client,
    keys: RoundKeys,
    futures: dict[str, Future],
    light: RoundResult,
    timeout: float,
) -> tuple[RoundResult, int]:
    """`light` with the round's weights, buffers and state, fetched from a copy of its update
    on a live worker (each worker holds one under all-gather), and the bytes fetched. OSError
    when no copy is left: a lost worker took the only one (the run resumes from latest.pt)."""
    updates = list(dict.fromkeys(futures[k] for k in keys.updates))
    names = [future.key for future in updates]
    holders = client.sync(client.scheduler.who_has, keys=names, callback_timeout=timeout)
    live = [future for future in updates if holders.get(future.key)]
    if not live:
        raise OSError("the round's weights were lost with their worker before being fetched")
    (full,) = bounded(client, timeout, client.gather, [live[0]])
    taken = replace(light, weights=full.weights, buffers=full.buffers, state=full.state)
    return taken, comm.payload_bytes([full.weights, full.buffers, full.state])


def take_held(client: Client, state: Any, held: tuple[RoundKeys, dict], timeout: float) -> None:
    """Into the RunState `state`: the weights of its last round, left on the cluster in the
    round's `held` keys and futures (a restart of the chain and an early end need them)."""
    light = RoundResult(weights=state.weights, state=state.state, shard_states=state.shard_states)
    taken, _ = take_weights(client, *held, light, timeout)
    state.weights, state.buffers, state.state = taken.weights, taken.buffers, taken.state
    state.weights_round = state.round
