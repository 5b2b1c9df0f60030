"""--overhead-share on a real cluster: the run measures as it starts, says what it chose in one
line, writes the chosen K to config.toml as local_steps, and a rerun from that file, or a
resume, trains the same K without measuring again (the rule: tests/algorithms/)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

# The smallest real run: an MLP on the 2-shard digits store, FedAvg, 2 rounds.
TINY = ("--model", "mlp", "--batch-size", "16", "--algorithm", "fedavg", "--rounds", "2")
CHOSEN = re.compile(
    r"--overhead-share 0\.3 chose K = (\d+) local steps .*c = \S+ ms a step, F = \S+ ms fixed a "
    r"round .*T_comm = \S+ ms a round; .* within \[1, 162\]"
)


def _steps(run: Path) -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["scheduled_local_steps"] for line in lines]


@pytest.mark.cluster
def test_the_chosen_k_is_written_and_a_rerun_and_a_resume_train_it(
    digits_stores, cluster_client, tmp_path, dane_here
):
    scheduler = ("--scheduler", cluster_client.scheduler.address)
    first, rerun = tmp_path / "first", tmp_path / "rerun"

    chose = dane_here(
        "train", str(digits_stores[2]), *TINY, *scheduler, "--overhead-share", "0.3",
        "--out", str(first), cwd=tmp_path,
    )  # fmt: skip
    again = dane_here(
        "train", "--config", str(first / "config.toml"), *scheduler, "--out", str(rerun),
        cwd=tmp_path,
    )  # fmt: skip
    resumed = dane_here(
        "train", "--out", str(first), "--resume", "--rounds", "3", *scheduler, cwd=tmp_path
    )

    assert chose.returncode == again.returncode == resumed.returncode == 0, (
        chose.stderr + again.stderr + resumed.stderr
    )
    said = [line for line in chose.stderr.splitlines() if "--overhead-share" in line]
    match = CHOSEN.search(said[0]) if len(said) == 1 else None
    assert match is not None, chose.stderr
    steps = int(match[1])
    text = (first / "config.toml").read_text()
    saved = tomllib.loads(text)
    assert saved["solver"]["local_steps"] == steps  # as if given: --local-steps K
    assert "overhead_share" not in saved["solver"]  # so nothing measures it again
    assert f"\n# {said[0].removeprefix('dask-dane: ')}\n" in text  # the measurements kept
    assert _steps(first) == [steps] * 3  # the first run's 2 rounds, and the resumed third
    assert _steps(rerun) == [steps] * 2
    assert "chose K" not in again.stderr + resumed.stderr
    assert tomllib.loads((rerun / "config.toml").read_text())["solver"]["local_steps"] == steps
