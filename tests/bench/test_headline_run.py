"""`dane bench headline` end to end on a small store: digits in m = 1, 2, 4 shards, one pass,
both recipes on a cluster and DDP beside them; the fixed costs are an earlier run's (--fixed-cost),
so that the test waits for no tiny rounds. Its JSON must hold every m's row, speed-ups that are
the ratios of its own times, and times that shrink as the compute speeds up."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.bench, pytest.mark.cluster]

SHARDS = (1, 2, 4)


def _fixed(ms: dict[int, float], phases: int) -> dict:
    rows = [
        {"workers": w, "ms_per_round": t, "dependent_steps": 3, "round_form": "torch-gloo",
         "hop": {"same_worker_ms": 6.0, "alternating_ms": 8.0}}
        for w, t in ms.items()
    ]  # fmt: skip
    return {"machine": {"cpu_count": 2}, "phases": phases, "fixed_cost": rows}


@pytest.fixture(scope="module")
def headline(tmp_path_factory, dane_here) -> tuple[dict, str, object]:
    folder = tmp_path_factory.mktemp("headline")
    earlier = {"dane": _fixed({1: 20.0, 2: 25.0}, 2), "fedavg": _fixed({1: 10.0, 2: 12.0}, 1)}
    (folder / "earlier.json").write_text(json.dumps({"measured": {"fixed_cost_runs": earlier}}))
    done = dane_here(
        "bench", "headline", "--dane-config", "preset:fashion-mnist-dane-scale",
        "--source", "digits", "--model", "small-cnn", "--shards", ",".join(map(str, SHARDS)),
        "--seeds", "0", "--passes", "1", "--targets", "0.3,0.5",
        "--fixed-cost", "earlier.json", "--json", "out.json", "--plot", "out.png",
        cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads((folder / "out.json").read_text()), done.stdout, folder


def test_every_m_has_its_measured_row_for_every_method(headline):
    result, _, _ = headline
    for name in ("dane", "fedavg", "ddp"):
        rows = result["measured"]["methods"][name]
        assert [row["shards"] for row in rows] == list(SHARDS)
        for row in rows:
            assert 0 < row["final_test_accuracy"]["mean"] <= 1
            assert [at["target"] for at in row["to_target"]] == [0.3, 0.5]
    # One pass of each recipe: its rounds, as the budget in passes set them.
    assert result["recipes"]["dane"]["rounds"] == 1 and result["recipes"]["fedavg"]["rounds"] == 8
    dane_runs = result["sweeps"][0]["dane"]["runs"]
    # The measured time to a target is the sum of the rounds' training time up to it.
    for run, row in zip(dane_runs, result["measured"]["methods"]["dane"], strict=True):
        at = row["to_target"][0]
        if at["iterations"]["mean"] is not None:
            rounds = int(at["iterations"]["mean"])
            expected = sum(run["timing"]["round_train_s"][:rounds])
            assert at["time_s"]["mean"] == pytest.approx(expected)


def test_each_speedup_per_doubling_is_the_ratio_of_the_projected_times(headline):
    result, _, _ = headline
    checked = 0
    for table in result["projected"]["tables"]:
        for name, rows in table["methods"].items():
            times = {row["shards"]: row["time_s"] for row in rows}
            for step in table["doublings"][name]["per_doubling"]:
                slow, fast = times[step["from"]], times[step["to"]]
                if slow is None or fast is None:
                    assert step["speedup"] is None
                else:
                    assert step["speedup"] == pytest.approx(slow / fast)
                    checked += 1
    assert checked > 0  # some method reached the first target at two counts


def test_projected_times_shrink_as_the_compute_speeds_up(headline):
    result, _, _ = headline
    by_key = {}
    for table in result["projected"]["tables"]:
        key = (table["target"], table["label"])
        by_key.setdefault(key, {})[table["compute_speedup"]] = table["methods"]
    compared = 0
    for speeds in by_key.values():
        assert sorted(speeds) == [1.0, 10.0, 100.0]
        for name, rows in speeds[1.0].items():
            for i in range(len(rows)):
                times = [speeds[k][name][i]["time_s"] for k in (1.0, 10.0, 100.0)]
                if None not in times:
                    assert times[0] > times[1] > times[2] > 0
                    compared += 1
    assert compared > 0


def test_the_targets_the_tables_and_the_figure_are_written(headline):
    result, stdout, folder = headline
    assert [c["name"] for c in result["targets"]] == [
        "time", "examples", "accuracy", "against FedAvg",
    ]  # fmt: skip
    assert all(isinstance(c["met"], bool) for c in result["targets"])
    assert "Speed-up per doubling of m" in stdout and "The targets:" in stdout
    assert result["measured"]["fixed_cost"]["dane"]["measured_s"] == {"1": 0.02, "2": 0.025}
    assert result["measured"]["ddp_rank_step_s"] > 0
    assert result["command"].startswith("dane bench headline")
    assert (folder / "out.png").stat().st_size > 10_000
