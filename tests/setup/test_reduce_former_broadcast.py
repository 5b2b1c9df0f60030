"""`--broadcast reduce` (and an older config's `direct` or `tree`) as a user still has it: a
flag, a --config key, a resumed run's config.toml or an API keyword reads as the default
(the round's all-gather) with one note on stderr, and trains to the default's weights."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch

from dask_dane.pipeline.plan import plan_run
from dask_dane.pipeline.setup.config import RunConfig, check_settings, read_record, to_toml
from dask_dane.pipeline.setup.resumed import check_same_run

NOTE = (
    "is no longer a separate collective: rounds cross by all-gather, which measured faster at "
    "every size; the weights are the same bit for bit"
)
# The smallest real run: an MLP on the 2-shard digits store, one round of 2 local steps.
TINY = ("--model", "mlp", "--rounds", "1", "--local-steps", "2", "--batch-size", "16")


def _latest_weights(run: Path) -> torch.Tensor:
    return torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["weights"]


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "no longer a separate collective" in line]


@pytest.mark.parametrize("former", ["reduce", "direct", "tree"])
def test_a_config_file_naming_a_former_value_reads_as_auto_with_one_note(former, tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text(f'[cluster]\nbroadcast = "{former}"\n')

    first, again = read_record(path), read_record(path)  # a resume reads it more than once

    assert first.original["broadcast"] == again.original["broadcast"] == "auto"
    notes = _notes(capsys.readouterr().err)
    assert notes == [f"{path}: broadcast {former!r} {NOTE}"]


def test_the_api_keyword_reads_as_auto_with_a_note(capsys):
    flags = check_settings({"broadcast": "reduce"}, "dask_dane.train", noun="keyword")

    assert flags == {"broadcast": "auto"}
    assert len(_notes(capsys.readouterr().err)) == 1


def test_the_flag_reads_as_auto_with_one_note(digits_stores, tmp_path, capsys):
    settings = {"store": str(digits_stores[2]), "out": str(tmp_path / "run"), "broadcast": "tree"}

    config = plan_run(settings)  # as `dane train --broadcast tree` plans its run

    assert config.broadcast == "auto"
    assert _notes(capsys.readouterr().err) == [f"--broadcast tree {NOTE}"]


def test_a_resume_of_a_run_made_with_reduce_changes_nothing(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(to_toml(RunConfig(store="s.zarr", broadcast="reduce").as_dict()))

    saved = read_record(path).effective

    assert check_same_run(saved, RunConfig(store="s.zarr").validate()) == {}


@pytest.mark.cluster
def test_broadcast_reduce_trains_to_the_defaults_weights_with_one_note(
    digits_stores, tmp_path, cluster_client, dane_here
):
    args = (str(digits_stores[2]), *TINY, "--scheduler", cluster_client.scheduler.address)

    default = dane_here("train", *args, "--out", str(tmp_path / "default"), cwd=tmp_path)
    reduce = dane_here(
        "train", *args, "--broadcast", "reduce", "--out", str(tmp_path / "reduce"), cwd=tmp_path
    )

    assert default.returncode == reduce.returncode == 0, reduce.stderr
    assert _notes(default.stderr) == []
    assert _notes(reduce.stderr) == [f"--broadcast reduce {NOTE}"]
    assert torch.equal(_latest_weights(tmp_path / "reduce"), _latest_weights(tmp_path / "default"))
    saved = tomllib.loads((tmp_path / "reduce" / "config.toml").read_text())
    assert saved["cluster"]["broadcast"] == "auto"

    # A run made before: its config.toml names reduce. It resumes, noted once, as no change.
    config = tmp_path / "default" / "config.toml"
    config.write_text(config.read_text().replace('broadcast = "auto"', 'broadcast = "reduce"'))
    resumed = dane_here(
        "train", "--resume", "--rounds", "2", "--out", str(tmp_path / "default"), cwd=tmp_path
    )

    assert resumed.returncode == 0, resumed.stderr
    assert len(_notes(resumed.stderr)) == 1
    record = tomllib.loads(config.read_text())
    assert [list(table) for table in record["resumed"]] == [["after_round", "rounds"]]
    assert record["cluster"]["broadcast"] == "auto"  # written back as it now reads
