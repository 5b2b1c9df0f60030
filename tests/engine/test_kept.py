"""What a worker keeps of its shards' reports between phases (kept.py): a cache whose miss
costs compute, never a bit of the result."""

from __future__ import annotations

import json

import pytest
import torch

from dask_dane.pipeline.engine.round import kept
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.engine.run.loop import train
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.setup.config import RunConfig


@pytest.fixture(autouse=True)
def _empty():
    kept.clear()
    yield
    kept.clear()


def test_a_report_is_taken_once_and_a_later_round_drops_the_earlier_ones():
    kept.put("run-a1", 3, 0, {0: "r0", 5: "r5"})
    assert kept.take("run-a1", 3, 0, 5) == "r5"
    assert kept.take("run-a1", 3, 0, 5) is None  # taken: the next phase ran
    kept.put("run-a1", 4, 0, {0: "next"})  # round 4 starts after round 3 ended everywhere
    assert kept.take("run-a1", 3, 0, 0) is None
    assert kept.take("run-a1", 4, 0, 0) == "next"
    assert kept.take("run-a1", 4, 1, 0) is None  # another phase, never kept


class _Update:
    """A stand-in for a RoundResult (weakly referable, as it is)."""


def test_a_round_s_update_is_made_once_while_a_task_holds_it():
    made = []

    def make():
        made.append(1)
        return _Update()

    held = kept.update_once("run-a1", 3, make)  # the update task: Dask holds its result
    assert kept.update_once("run-a1", 3, make) is held  # inline in round 4's first phase
    assert len(made) == 1
    assert kept.update_once("run-a2", 3, make) is not held  # another chain: made again
    kept.update_once("run-a1", 4, make)  # the next round's update replaces the note
    assert kept.update_once("run-a1", 3, make) is not held and len(made) == 4


def test_a_released_update_is_made_again_and_not_kept_alive():
    made = []
    kept.update_once("run-a1", 3, lambda: made.append(1) or _Update())
    # Nothing holds the update any more (Dask released it): the note does not keep it.
    kept.update_once("run-a1", 3, lambda: made.append(1) or _Update())
    assert len(made) == 2


def test_only_the_latest_chains_are_kept():
    for chain in ("run-a1", "run-a2", "other-a1"):  # a restart, then another run's rounds
        kept.put(chain, 1, 0, {0: chain})
    assert kept.take("run-a1", 1, 0, 0) is None
    assert [kept.take(c, 1, 0, 0) for c in ("run-a2", "other-a1")] == ["run-a2", "other-a1"]


def _disable_the_cache() -> None:
    kept.CHAINS_KEPT = 0  # every put evicts at once: every take misses


def _enable_the_cache() -> None:
    kept.CHAINS_KEPT = 2


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
        assert cluster_client.run(lambda: len(kept._chains)) == {
            w: 0 for w in cluster_client.scheduler_info()["workers"]
        }
    finally:
        cluster_client.run(_enable_the_cache)

    assert torch.equal(weights, recomputed)
    for row, again in zip(rows, recomputed_rows, strict=True):
        assert row["train_loss"] == again["train_loss"]
        assert row["test_accuracy"] == again["test_accuracy"]
        assert row["images"] == again["images"]
