"""`dane bench local-steps`: the figures a run's rows give, the verdict against issue 61's
targets, and one real run of the command on digits."""

from __future__ import annotations

import json

import pytest

from dask_dane.bench.training.local_steps import LocalStepsSpec, measure, verdict
from dask_dane.bench.training.local_steps_report import markdown_table

pytestmark = pytest.mark.bench


def _rows(accuracy: list[float], images: int = 100) -> list[dict]:
    return [
        {"round": i + 1, "test_accuracy": a, "images": images, "local_steps": 10.0}
        for i, a in enumerate(accuracy)
    ]


def test_a_runs_figures_count_rounds_and_examples_to_target_and_the_worst_fall():
    figures = measure(_rows([0.80, 0.95, 0.90, 0.97, 0.96]), target=0.97)

    assert figures["rounds_to_target"] == 4
    assert figures["examples_to_target"] == 400
    assert (figures["best"], figures["final"]) == (0.97, 0.96)
    assert figures["worst_fall"] == pytest.approx(5.0)  # 0.95 -> 0.90
    assert measure(_rows([0.5, 0.6]), target=0.97)["rounds_to_target"] is None


def _run(steps: int, accuracy: list[float], seed: int = 0) -> dict:
    return {
        "source": "digits", "candidate": "dane", "steps": steps, "seed": seed,
        **measure(_rows(accuracy), target=0.97),
    }  # fmt: skip


def test_the_verdict_checks_falls_the_final_at_300_and_rounds_non_increasing_in_k():
    good = [
        _run(30, [0.90, 0.95, 0.97]),
        _run(300, [0.95, 0.97, 0.975]),
        _run(1000, [0.97, 0.975, 0.98]),
    ]
    assert verdict(good)["digits dane"] | {"mean_final": None} == {
        "worst_fall": 0.0, "runs_with_a_fall": 0, "runs": 3, "no_collapse": True,
        "final_kept_at_300": True, "rounds_non_increasing": True, "mean_final": None,
        "mean_rounds_to_target": {"30": 3.0, "300": 2.0, "1000": 1.0},
    }  # fmt: skip
    # A collapse at K = 1000 that never reaches the target after K = 300 did: all three fail.
    bad = [*good[:1], _run(300, [0.96, 0.97, 0.955]), _run(1000, [0.96, 0.5, 0.6])]
    v = verdict(bad)["digits dane"]
    assert (v["no_collapse"], v["final_kept_at_300"], v["rounds_non_increasing"]) == (
        False, False, False,
    )  # fmt: skip
    assert v["runs_with_a_fall"] == 1 and v["mean_rounds_to_target"]["1000"] == 4.0
    table = markdown_table({"runs": bad, "verdict": verdict(bad)})
    assert "| digits | dane | 1000 | 0 | - |" in table and "**no**" in table


def test_the_spec_refuses_unknown_sources_candidates_and_negative_steps():
    with pytest.raises(ValueError, match="--sources"):
        LocalStepsSpec(sources=("cifar",)).validate()
    with pytest.raises(ValueError, match="--candidates"):
        LocalStepsSpec(candidates=("adam",)).validate()
    with pytest.raises(ValueError, match="K >= 1, or 0 for one pass"):
        LocalStepsSpec(digits_steps=(-1,)).validate()
    one_pass = LocalStepsSpec().config("s.zarr", "fashion-mnist", "fedavg", 0, seed=1)
    assert (one_pass.local_epochs, one_pass.batch_size, one_pass.model) == (
        1.0, 64, "compact-cnn",
    )  # fmt: skip
    assert one_pass.out.endswith("fashion-mnist-fedavg-Kpass-seed1")


@pytest.mark.cluster
def test_the_command_trains_each_k_and_writes_the_json_and_the_figure(tmp_path, dane_here):
    out, figure = tmp_path / "r.json", tmp_path / "r.png"
    done = dane_here(
        "bench", "local-steps", "--sources", "digits", "--candidates", "dane,dane-mu0",
        "--digits-steps", "5,100", "--rounds", "2", "--workdir", str(tmp_path / "w"),
        "--json", str(out), "--plot", str(figure), cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [(r["candidate"], r["steps"]) for r in result["runs"]] == [
        ("dane", 5), ("dane", 100), ("dane-mu0", 5), ("dane-mu0", 100),
    ]  # fmt: skip
    for run in result["runs"]:
        assert len(run["test_accuracy"]) == 2 and 0 < run["final"] <= 1
    # The defaults as resolved: K = 5 is a quarter pass over a 647-row shard, K = 100 five.
    assert "mu=0.01 K=5" in result["runs"][0]["label"]
    assert "mu=0.1 theta=0.3 K=100" in result["runs"][1]["label"]
    assert "mu=0 K=5" in result["runs"][2]["label"]
    assert set(result["verdict"]) == {"digits dane", "digits dane-mu0"}
    assert figure.stat().st_size > 0
