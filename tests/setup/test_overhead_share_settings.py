"""--overhead-share as a setting: which other settings it refuses, how it layers with a config
file and a resume, and the run's settings once it has chosen K (setup/measured_steps.py).
The run that measures is tests/setup/test_overhead_share.py's."""

from __future__ import annotations

import pytest

from dask_dane.pipeline.algorithms import SettingError
from dask_dane.pipeline.engine.run.rundir import RunDir
from dask_dane.pipeline.plan import plan_run
from dask_dane.pipeline.setup.config import RunConfig
from dask_dane.pipeline.setup.measured_steps import gradient_rows, steps_ceiling, with_local_steps
from dask_dane.pipeline.setup.run_file import write_run_config
from dask_dane.pipeline.setup.run_setup import prepare_run


def test_with_local_epochs_on_the_command_line_is_one_line_and_exit_2(
    digits_stores, tmp_path, run_cli, capfd, assert_one_line_error
):
    out = tmp_path / "run"

    status = run_cli(
        ["train", str(digits_stores[2]), "--local-epochs", "1", "--overhead-share", "0.1",
         "--out", str(out)]
    )  # fmt: skip

    assert_one_line_error(status, capfd, ["--local-epochs", "--overhead-share", "give one"])
    assert not out.exists()  # refused before anything is written


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"algorithm": "sgd"}, "applies to --algorithm dane or"),  # one step a round: no K
        ({"local_solver": "lbfgs", "model": "logistic"}, "solves the local problem exactly"),
        ({"local_epochs": 1.0}, "both choose K"),  # given together to RunConfig itself
        ({"overhead_share": 1.0}, "must be in (0, 1)"),
    ],
)
def test_settings_it_cannot_go_with_are_refused(settings, fragment):
    with pytest.raises(SettingError) as refused:
        RunConfig(**{"overhead_share": 0.1, **settings}).validate()

    assert fragment in str(refused.value)


def test_a_file_and_the_flags_layer_as_for_every_setting(tmp_path):
    epochs_file = tmp_path / "epochs.toml"
    epochs_file.write_text("local_epochs = 0.5\n")
    share_file = tmp_path / "share.toml"
    share_file.write_text("overhead_share = 0.2\n")
    both_file = tmp_path / "both.toml"
    both_file.write_text("overhead_share = 0.2\nlocal_steps = 8\n")

    chosen = plan_run({"store": "s", "overhead_share": 0.1}, file=epochs_file)
    given = plan_run({"store": "s", "local_steps": 5}, file=share_file)

    assert (chosen.overhead_share, chosen.local_epochs) == (0.1, None)  # the flag wins
    assert (given.overhead_share, given.local_steps) == (None, 5)
    with pytest.raises(SettingError, match="both in the file"):
        plan_run({"store": "s"}, file=both_file)


def test_a_resume_trains_the_k_it_chose_and_refuses_choosing_again(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    write_run_config(run, RunConfig(store="s", out=str(run.root), local_steps=37))

    resumed = plan_run({"out": str(run.root), "rounds": 30}, resume=True)

    assert (resumed.local_steps, resumed.overhead_share) == (37, None)
    with pytest.raises(SettingError) as refused:
        plan_run({"out": str(run.root), "overhead_share": 0.1}, resume=True)
    assert "local_steps=37" in str(refused.value) and "drop overhead_share" in str(refused.value)


def test_the_chosen_k_stands_as_if_given_and_what_is_counted_along_k_follows(digits_stores):
    # digits, 2 shards of 719 rows, 10 % held out, batch 16: 40.4 steps a pass over a shard.
    config = RunConfig(
        store=str(digits_stores[2]), model="mlp", algorithm="fedavg", batch_size=16,
        overhead_share=0.1, lr_warmup_epochs=1.0,
    ).validate()  # fmt: skip
    setup = prepare_run(config)

    chosen = with_local_steps(setup, 7)

    assert (chosen.config.local_steps, chosen.config.overhead_share) == (7, None)
    assert chosen.strategy.solver.local_steps == 7
    # A pass in rounds of 7 steps: 6 rounds (40.4 / 7 = 5.8), where the planned 30 made 2.
    assert (setup.config.lr_warmup, chosen.config.lr_warmup) == (2, 6)
    assert chosen.strategy.solver.lr_warmup == 6
    assert steps_ceiling(setup) == 162  # 4 passes: round(4 x 40.4375)
    assert gradient_rows(setup) == (647, 0.0)  # the larger shard's training rows


def test_danes_unset_mu_follows_the_chosen_k(digits_stores):
    # The unset mu is 0.1 past 4 passes a solve, else 0.01 (well_posed.py): the strategy is
    # made again for the chosen K, not kept from the planned one.
    setup = prepare_run(RunConfig(store=str(digits_stores[2]), overhead_share=0.1).validate())

    assert with_local_steps(setup, 5).strategy.mu == 0.01
    assert with_local_steps(setup, 200).strategy.mu == 0.1
