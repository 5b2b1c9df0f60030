"""What a worker keeps between its tasks (worker.py, in worker_state.WORKER): each round
opened once, each phase finished once, each shard's report handed to its next phase and the
update made once per worker; a cache whose miss costs compute, never a bit of the result."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from dask_dane.pipeline.engine.round import worker, worker_state
from dask_dane.pipeline.engine.round.aggregate import owned_nodes
from dask_dane.pipeline.engine.round.shards import load_shard
from dask_dane.pipeline.engine.round.worker_state import WORKER
from dask_dane.pipeline.engine.run.bounded import cluster_identity
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.run_state import RunState, round_input_of
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.run_setup import prepare_run
from dask_dane.pipeline.training import train


@pytest.fixture(autouse=True)
def _empty():
    WORKER.clear()
    yield
    WORKER.clear()


def _counted(monkeypatch) -> Counter:
    """Calls of the round's pure functions as worker.py makes them, counted."""
    calls: Counter = Counter()
    for name in ("open_round", "finish_phase", "run_local", "make_update"):
        real = getattr(worker, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(worker, name, counting)
    return calls


def _dane_round_on_one_worker(store, chain: str):
    """One DANE round (two phases) of 4 shards on one worker, its tasks in the graph's order:
    both phases, the update task, then the next round's inline update and the scoring's."""
    config = RunConfig(store=str(store), model="mlp", algorithm="dane", local_steps=2, seed=3)
    setup = prepare_run(config.validate())
    placement = ["w"] * setup.store.num_shards
    shards = [load_shard(**setup.shard_args(i)) for i in range(setup.store.num_shards)]
    static = round_input_of(setup, 1, placement)
    static = static.__class__(**{**vars(static), "chain": chain})
    carry, nodes = RunState.fresh(setup), owned_nodes(placement, "w")
    grads = worker.run_worker_phase(static, 0, shards, nodes, carry, [], None)
    received = [[worker.nodes_of(grads)]]
    solves = worker.run_worker_phase(static, 1, shards, nodes, carry, received, None)
    last = [worker.nodes_of(solves)]
    return [worker.update_on_worker(static, carry, received, last) for _ in range(3)]


def test_a_worker_opens_a_round_once_and_finishes_each_phase_once(digits_stores, monkeypatch):
    calls = _counted(monkeypatch)
    updates = _dane_round_on_one_worker(digits_stores[4], chain="run-a1")

    assert calls == {"open_round": 1, "finish_phase": 1, "run_local": 8, "make_update": 1}
    assert updates[0] is updates[1] is updates[2]  # Dask holds the first: the note finds it


def test_without_a_chain_nothing_is_kept_and_the_bits_are_the_same(digits_stores, monkeypatch):
    kept = _dane_round_on_one_worker(digits_stores[4], chain="run-a1")[0]
    calls = _counted(monkeypatch)
    made = _dane_round_on_one_worker(digits_stores[4], chain="")

    # Every task makes what it needs itself: the round opened by each of the 5, phase 0
    # finished by the solves and each update, its leaves made again by the solves.
    assert calls == {"open_round": 5, "finish_phase": 4, "run_local": 12, "make_update": 3}
    assert torch.equal(kept.weights, made[0].weights)
    assert kept.metrics == made[0].metrics and kept.comm_bytes == made[0].comm_bytes


def test_only_the_latest_rounds_and_chains_are_kept(digits_stores):
    _dane_round_on_one_worker(digits_stores[4], chain="run-a1")
    _dane_round_on_one_worker(digits_stores[4], chain="run-a2")  # a restart
    _dane_round_on_one_worker(digits_stores[4], chain="other-a1")  # another run's rounds
    assert list(WORKER.rounds) == ["run-a2", "other-a1"]
    made = WORKER.rounds["other-a1"][1]
    # The update made: the round's opening, ends and leaves are dropped, its note stays.
    assert made.opened is None and made.ends == [] and made.leaves == {}


def _disable_the_cache() -> None:
    worker_state.CHAINS_KEPT = 0  # every round's record is evicted at once: every task misses


def _enable_the_cache() -> None:
    worker_state.CHAINS_KEPT = 2


# Two phases (DANE), three (S-DANE's check; DANE's line search after its solve).
SETTINGS = {
    "dane": dict(algorithm="dane"),
    "sdane-adaptive": dict(algorithm="sdane-adaptive", mu=2.0),
    "dane-line-search": dict(algorithm="dane", line_search=3, grad_sample=60),
}


@pytest.mark.cluster
@pytest.mark.parametrize("case", SETTINGS)
def test_a_worker_that_kept_nothing_computes_the_same_bits(
    case, digits_stores, cluster_client, tmp_path
):
    def run(out: str) -> tuple[torch.Tensor, list[dict]]:
        config = RunConfig(
            store=str(digits_stores[4]), out=str(tmp_path / out), model="small-cnn",
            rounds=3, local_steps=4, batch_size=16, seed=5, **SETTINGS[case],
        ).validate()  # fmt: skip
        train(config, client=cluster_client)
        rows = [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").open()]
        return load_checkpoint(RunDir(tmp_path / out).latest)["weights"], rows

    weights, rows = run("kept")
    cluster_client.run(_disable_the_cache)
    try:
        recomputed, recomputed_rows = run("recomputed")
        assert cluster_client.run(lambda: len(worker_state.WORKER.rounds)) == {
            w: 0 for w in cluster_identity(cluster_client)["workers"]
        }
    finally:
        cluster_client.run(_enable_the_cache)

    assert torch.equal(weights, recomputed)
    for row, again in zip(rows, recomputed_rows, strict=True):
        assert row["train_loss"] == again["train_loss"]
        assert row["test_accuracy"] == again["test_accuracy"]
        assert row["images"] == again["images"]
