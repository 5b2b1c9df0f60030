"""`dane bench train` end to end: a TOML of runs, one cluster, then JSON, table and PNG."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dask_dane.bench.output import save_results
from dask_dane.cli import app


@pytest.mark.cluster
def test_bench_train_runs_every_run_and_writes_json_table_and_figure(digits_stores, tmp_path):
    configs = tmp_path / "runs.toml"
    configs.write_text(
        f'[defaults]\nstore = "{digits_stores[2]}"\nrounds = 2\nlocal_steps = 3\n'
        'dashboard_address = "127.0.0.1:0"\n\n'
        '[[run]]\nname = "dane"\n\n[[run]]\nname = "fedavg"\nalgorithm = "fedavg"\n'
    )
    out = tmp_path / "out"

    done = CliRunner().invoke(
        app,
        ["bench", "train", "--configs", str(configs), "--json", str(out / "r.json"),
         "--plot", str(out / "r.png"), "--workdir", str(out / "runs")],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    result = json.loads((out / "r.json").read_text())
    assert result["command"].startswith("dane ")  # the command line (sys.argv) is recorded
    assert [r["name"] for r in result["runs"]] == ["dane", "fedavg"]
    dane, fedavg = result["runs"]
    # DANE's two phases are two communication rounds a round; FedAvg's one.
    assert [p["comm_rounds"] for p in dane["curve"]] == [2, 4]
    assert [p["comm_rounds"] for p in fedavg["curve"]] == [1, 2]
    assert all(0.1 < r["summary"]["final_test_accuracy"] <= 1 for r in result["runs"])
    assert (out / "runs" / "fedavg" / "metrics.jsonl").exists()
    assert "| fedavg |" in done.output and "| dane |" in done.output
    assert (out / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "r.png").stat().st_size > 10_000


def test_a_figure_from_a_bench_that_draws_none_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="draws no figure; drop --plot"):
        save_results({}, json_out=None, plot_out=tmp_path / "x.png", table=str)
