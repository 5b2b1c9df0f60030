"""What the driver fetches of a round: its row's figures every round, its weights only when
the driver must hold them (--checkpoint-every, the run's end, a new best.pt, a restart).

A round's weights, buffers and strategy state stay on the cluster otherwise: a small task of
the round's graph (`figures`, worker_round.stripped beside the update) sends the driver the
round's figures and whether the weights are finite, so divergence is still caught in the
round it happens. The scores of an evaluated round come one per worker; the driver adds them
(scoring.combine_scores), so no task on the cluster waits for the slowest worker's.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from distributed import Client, Future

from ..round import comm
from ..round.graph import RoundKeys
from ..round.scoring import combine_scores
from ..round.tasks import RoundResult
from ..round.worker_round import weights_finite
from .cluster import bounded, wait_for


def checkpointed(every: int, rounds: int, t: int) -> bool:
    """Whether round t's weights come to the driver and are saved: every `every` rounds
    (--checkpoint-every), and the run's last round."""
    return t % every == 0 or t == rounds


def outputs(keys: RoundKeys, futures: dict[str, Future]) -> tuple[Future, list, list]:
    """A round's update (one copy; its figures alone where the round built them), its scores
    (one per worker; [] if not evaluated) and its last phase's outputs (the shards' states)."""
    update = futures[keys.figures] if keys.figures else futures[keys.updates[0]]
    scores = [futures[k] for k in keys.evaluation]
    return update, scores, [futures[k] for k in keys.states]


def collect(
    client: Client,
    futures: tuple[Future, list[Future], list[Future]],
    timeout: float,
) -> tuple[RoundResult, dict[str, float] | None, int, dict[str, float], bool]:
    """A round's result (with its shards' states, if any) and evaluation, once done, from
    `futures` (outputs: the update or its figures, the scores, the last phase's outputs); the
    tensor bytes fetched, the driver's time waiting and fetching, and whether the weights
    are finite. From the figures alone, the result holds NO_WEIGHTS, no buffers and no state."""
    update, scores, states = futures
    started = time.perf_counter()
    wait_for(client, [update, *scores, *states], timeout)
    done = time.perf_counter()
    values = bounded(client, timeout, client.gather, [update, *scores, *states])
    waited = {"wait_s": done - started, "gather_s": time.perf_counter() - done}
    fetched = comm.payload_bytes(values)
    taken = values[0]
    result, finite = taken if isinstance(taken, tuple) else (taken, weights_finite(taken))
    outputs = values[1 + len(scores) :]
    if outputs:
        merged: dict[int, Any] = {}
        for output in outputs:
            merged.update(output.shard_states or {})
        result = replace(result, shard_states=[merged[i] for i in sorted(merged)])
    evaluation = combine_scores(*values[1 : 1 + len(scores)]) if scores else None
    return result, evaluation, fetched, waited, finite


def take_round(
    client: Client, config: Any, state: Any, t: int, round_keys: tuple[RoundKeys, dict]
) -> tuple[RoundResult, dict[str, float] | None, int, dict[str, float], bool, bool]:
    """collect's figures of round t (its keys and their futures), and whether they hold its
    weights: on a checkpoint round, or where the round becomes best.pt (state.would_select,
    from its evaluation: the weights are taken then, while the round's keys are held)."""
    keys, futures = round_keys
    weights = not keys.figures  # the round built its figures where the driver takes no weights
    result, evaluation, fetched, waited, finite = collect(
        client, outputs(keys, futures), config.timeout
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
