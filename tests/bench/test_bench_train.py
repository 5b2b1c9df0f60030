"""`dane bench train` end to end: a TOML of runs, one cluster, then JSON, table and PNG."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dask_dane.bench.common.output import save_results
from dask_dane.bench.training.train import equal_rounds_table
from dask_dane.cli.commands import app

pytestmark = pytest.mark.bench


@pytest.mark.cluster
def test_bench_train_runs_every_run_and_writes_json_table_and_figure(digits_stores, tmp_path):
    configs = tmp_path / "runs.toml"
    configs.write_text(
        f'[defaults]\nstore = "{digits_stores[4]}"\nrounds = 9\nlocal_steps = 3\n'
        'dashboard_address = "127.0.0.1:0"\n\n'
        '[[run]]\nname = "dane"\n\n[[run]]\nname = "fedavg"\nalgorithm = "fedavg"\n'
    )
    out = tmp_path / "out"

    done = CliRunner().invoke(
        app,
        ["bench", "train", "--config", str(configs), "--json", str(out / "r.json"),
         "--plot", str(out / "r.png"), "--workdir", str(out / "runs"),
         "--store", str(digits_stores[2]), "--comm-rounds", "4"],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads((out / "r.json").read_text())
    assert result["command"].startswith("dane ")  # the command line (sys.argv) is recorded
    assert [r["name"] for r in result["runs"]] == ["dane", "fedavg"]
    dane, fedavg = result["runs"]
    # --store replaced the TOML's; --comm-rounds 4 is DANE's 2 rounds (2 phases each) and
    # FedAvg's 4, whatever `rounds` the TOML gave.
    assert {r["config"]["store"] for r in result["runs"]} == {str(digits_stores[2])}
    assert [p["comm_rounds"] for p in dane["curve"]] == [2, 4]
    assert [p["comm_rounds"] for p in fedavg["curve"]] == [1, 2, 3, 4]
    assert all(0.1 < r["summary"]["final_test_accuracy"] <= 1 for r in result["runs"])
    assert (out / "runs" / "fedavg" / "metrics.jsonl").exists()
    assert "| fedavg |" in done.output and "| dane |" in done.output
    assert (out / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "r.png").stat().st_size > 10_000


def test_a_figure_from_a_bench_that_draws_none_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="draws no figure; drop --plot"):
        save_results({}, json_out=None, plot_out=tmp_path / "x.png", table=str)


def test_accuracy_at_equal_communication_rounds_takes_the_last_evaluation_before_each():
    def run(name, points):
        return {"name": name, "curve": [{"comm_rounds": c, "test_accuracy": a} for c, a in points]}

    result = {
        "runs": [
            run("fedavg", [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]),
            run("dane", [(2, 0.55), (4, 0.9)]),
            run("late", [(3, 0.4)]),
        ]
    }

    table = equal_rounds_table(result, columns=4).splitlines()

    assert table[0] == "| run | 1 comm rounds | 2 comm rounds | 3 comm rounds | 4 comm rounds |"
    assert table[2] == "| fedavg | 0.5000 | 0.6000 | 0.7000 | 0.8000 |"
    assert table[3] == "| dane | - | 0.5500 | 0.5500 | 0.9000 |"  # round 3: still round 2's
    assert table[4] == "| late | - | - | 0.4000 | 0.4000 |"


def test_the_skew_summary_picks_each_methods_best_rate_and_measures_the_family_gap():
    from dask_dane.bench.training.skew import best_per_method, by_store, family_gap, store_table

    def run(name, lr, points, error=None):
        curve = [
            {"comm_rounds": c, "test_accuracy": a, "cum_comm_bytes": 1e6 * c} for c, a in points
        ]
        best = max((a for _, a in points), default=None)
        return {
            "name": name,
            "config": {"local_lr": lr, "store": "/data/s.zarr"},
            "summary": {} if error else {"best_test_accuracy": best},
            "curve": curve,
            "seconds": 10.0,
            "error": error,
        }

    result = {
        "runs": [
            run("fedavg-lr0.05", 0.05, [(1, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]),
            run("fedavg-lr0.1", 0.1, [(1, 0.6), (2, 0.65), (3, 0.7), (4, 0.75)]),
            run("dane-lr0.05", 0.05, [(2, 0.3)], error="diverged"),
            run("feddyn-lr0.05", 0.05, [(1, 0.55), (2, 0.7), (3, 0.75), (4, 0.79)]),
            run("sdane-lr0.05", 0.05, [(1, 0.9)], error="diverged"),  # counts 0 once stopped
        ]
    }

    picked = best_per_method(result)
    gaps = family_gap(picked, [2, 4])
    only_baselines = family_gap({"fedavg": picked["fedavg"]}, [2, 4])
    table = store_table("s", result, columns=2)
    with_target = store_table("s", result, columns=2, target=0.7)

    assert {m: r["config"]["local_lr"] for m, r in picked.items()} == {
        "fedavg": 0.05, "dane": 0.05, "feddyn": 0.05, "sdane": 0.05,
    }  # fmt: skip
    assert [(g["family"], g["baseline"], g["gap_points"]) for g in gaps] == [
        ("feddyn", "fedavg", 10.0), ("feddyn", "fedavg", -1.0),
    ]  # fmt: skip
    assert only_baselines == []  # a result still being written: nothing to compare yet
    assert "| fedavg | 0.05 | 60.0 | 80.0 | 80.0 | 4 | 10 |" in table
    assert "| dane (diverged) | 0.05 | 30.0 | stopped | - | 2 | 10 |" in table
    assert "| best | MB sent | wall (s) | to 70 % |" in with_target
    assert "| fedavg | 0.05 | 60.0 | 80.0 | 80.0 | 4 | 10 | 3 |" in with_target
    assert "| dane (diverged) | 0.05 | 30.0 | stopped | - | 2 | 10 | - |" in with_target
    # Runs added later, in a result of their own, join their store's table.
    later = {"runs": [run("dane-ls-lr0.05", 0.05, [(3, 0.6)])]}
    grouped = by_store([result, later])
    assert list(grouped) == ["s"] and len(grouped["s"]["runs"]) == 6


def test_a_missing_store_given_with_store_is_refused_before_any_run(tmp_path):
    from dask_dane.bench.training.train import read_runs

    configs = tmp_path / "runs.toml"
    configs.write_text('[[run]]\nname = "fedavg"\nalgorithm = "fedavg"\n')

    with pytest.raises(ValueError, match=r"nope\.zarr does not exist"):
        read_runs(configs, tmp_path, store=str(tmp_path / "nope.zarr"), comm_rounds=4)


def test_config_repeats_for_several_files_and_refuses_a_run_named_twice(tmp_path):
    from dask_dane.bench.training.train import read_runs

    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    first.write_text('[defaults]\nrounds = 2\n[[run]]\nname = "dane"\n')
    second.write_text('[[run]]\nname = "fedavg"\nalgorithm = "fedavg"\n')

    runs = read_runs([first, second], tmp_path)

    assert [(name, config.algorithm) for name, config in runs] == [
        ("dane", "dane"), ("fedavg", "fedavg")
    ]  # fmt: skip
    assert runs[0][1].rounds == 2 and runs[1][1].rounds != 2  # each file's own defaults
    with pytest.raises(ValueError, match="runs named dane more than once"):
        read_runs([first, first], tmp_path)


@pytest.mark.parametrize("flag", ["--config", "--configs"])  # --configs: its former name
def test_bench_train_reads_its_runs_file_from_config_or_the_hidden_configs(flag, tmp_path):
    missing = tmp_path / "runs.toml"

    done = CliRunner().invoke(
        app, ["bench", "train", flag, str(missing), "--json", str(tmp_path / "r.json")]
    )

    assert isinstance(done.exception, ValueError)  # `dane` prints it as one line, status 2
    assert str(done.exception) == f"{missing} does not exist; check the --config path"
    assert "--configs" not in CliRunner().invoke(app, ["bench", "train", "--help"]).output
