"""`--shard-memory` as a user passes it to `dane train`: an unknown value is exit 2 and one
line, auto says what it chose in the first line and config.toml, and a shard too big to hold
resident is one line naming it and the fix, with nothing written. What streaming does:
tests/datasets/test_streamed_shards.py."""

from __future__ import annotations

import pytest


def test_an_unknown_shard_memory_is_exit_2_and_one_line(run_cli, capfd, assert_one_line_error):
    status = run_cli(["train", "--shard-memory", "swap", "--rounds", "1"])
    assert_one_line_error(
        status, capfd, ["--shard-memory", "'swap'", "resident, converted, stream, auto"]
    )


@pytest.mark.cluster
def test_auto_says_what_it_chose_beside_the_dashboard_and_in_config_toml(
    digits_stores, cluster_client, tmp_path, dane_here
):
    out = tmp_path / "run"
    done = dane_here(
        "train", str(digits_stores[2]), "--model", "mlp", "--rounds", "1", "--out", str(out),
        "--shard-memory", "auto", "--scheduler", cluster_client.scheduler.address, cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"run folder: {out}"  # the run's folder first, then what it chose
    assert lines[1] == f"watch it with: dane watch {out}"
    # Then short lines, one thing each (issue 72 item 7): no 300-character dashboard line.
    assert lines[2] == "cluster: 2 workers"
    assert lines[3].startswith("shards: auto: resident (shard ")
    assert lines[4].startswith("evaluation: test resident (")
    assert lines[5].startswith("collective: ") and "(auto: " in lines[5]
    assert lines[6].startswith("dashboard: ")
    assert all(len(line) <= 160 for line in lines[2:7]), lines[2:7]  # was one of ~300
    config = (out / "config.toml").read_text()
    assert 'shard_memory = "auto"' in config and "# shard_memory auto: resident (shard" in config


@pytest.mark.cluster
def test_a_shard_too_big_to_hold_is_one_line_naming_it_and_the_fix(
    digits_stores, cluster_client, tmp_path, run_cli, capfd, assert_one_line_error, monkeypatch
):
    from dask_dane.pipeline.setup import shard_memory

    monkeypatch.setattr(shard_memory, "RESIDENT_FITS_SHARE", 1e-6)  # a worker of a few bytes
    out = tmp_path / "run"
    address = cluster_client.scheduler.address
    status = run_cli(["train", str(digits_stores[2]), "--model", "mlp", "--rounds", "1",
                      "--out", str(out), "--scheduler", address,
                      "--shard-memory", "resident"])  # fmt: skip

    assert_one_line_error(status, capfd, ["shard 0 holds", "--shard-memory stream"])
    assert not out.exists()  # nothing written


def test_a_cluster_without_workers_is_a_clear_error_not_an_index_error(digits_stores):
    from dask_dane.pipeline.setup.config import RunConfig
    from dask_dane.pipeline.setup.run_setup import prepare_run
    from dask_dane.pipeline.setup.shard_memory import place_shards

    setup = prepare_run(RunConfig(store=str(digits_stores[2]), workers=2).validate())
    with pytest.raises(ValueError, match=r"^the cluster has no workers to hold the shards"):
        place_shards(setup, {"workers": {}}, announce=lambda line: None)
