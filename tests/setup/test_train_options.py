"""`dane train`'s options come from RunConfig; settings errors name fields, the CLI flags."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import typer
from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.pipeline.algorithms import SettingError, make_strategy
from dask_dane.pipeline.algorithms.parts.hyperparameters import shown_default
from dask_dane.pipeline.setup.config import RunConfig, in_flags
from dask_dane.pipeline.setup.settings import scheduler_file_address


def _train_params() -> dict[str, object]:
    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {p.name: p for p in command.params}


def test_train_takes_one_option_per_run_config_field_with_its_default_in_the_help():
    params = _train_params()

    for f in dataclasses.fields(RunConfig):
        param = params[f.name]
        assert param.default is None  # not given: a --config file's value stands
        shown = shown_default(f.default)
        if shown is not None:
            assert param.help.endswith(f"[{shown}]."), (f.name, param.help)
    assert params["local_lr"].help == "Learning rate, gd/agd step [0.05]."
    assert params["local_tol"].help.endswith("[1e-10].")
    # Beside them only the former spellings of renamed flags (hidden; cli/options.py).
    former = {name for name in params if name.endswith("__former")}
    assert {params[name].hidden for name in former} == {True} and len(former) == 3
    assert set(params) - former == {f.name for f in dataclasses.fields(RunConfig)} | {
        "config",
        "resume",
    }


def test_flags_reach_the_run_config_by_field_name_and_type(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"

    refused = runner.invoke(app, ["train", "--out", str(out), "--threads-per-worker", "0"])
    not_a_number = runner.invoke(app, ["train", "--out", str(out), "--local-lr", "fast"])

    assert isinstance(refused.exception, ValueError)
    assert str(refused.exception) == "--threads-per-worker must be at least 1 (got 0)"
    assert not_a_number.exit_code == 2 and "Invalid value for '--local-lr'" in not_a_number.output
    assert _train_params()["store"].param_type_name == "argument"
    assert not out.exists()


def test_algorithm_errors_name_the_fields_and_the_cli_words_them_as_flags():
    settings = {**RunConfig().as_dict(), "grad_sample_growth": 2.0}

    with pytest.raises(SettingError) as raised:
        make_strategy("dane", settings)

    assert str(raised.value) == (
        "grad_sample_growth grows the gradient sample from grad_sample=N rows; "
        "pass grad_sample=N as well"
    )
    assert in_flags(raised.value) == (
        "--grad-sample-growth grows the gradient sample from --grad-sample N rows; "
        "pass --grad-sample N as well"
    )


def test_a_rule_names_the_field_with_its_flag_and_the_cli_the_flag_alone():
    with pytest.raises(SettingError) as raised:
        make_strategy("sgd", {**RunConfig().as_dict(), "local_lr": 0.0})

    assert str(raised.value) == "local_lr (--local-lr) must be a positive number (got 0.0)"
    assert in_flags(raised.value) == "--local-lr must be a positive number (got 0.0)"


def test_a_setting_error_keeps_both_wordings_through_pickle(tmp_path):
    with pytest.raises(SettingError) as raised:
        scheduler_file_address(str(tmp_path / "none.json"))

    copy = pickle.loads(pickle.dumps(raised.value))

    assert str(copy) == str(raised.value)
    assert str(copy).startswith(f"scheduler_file={tmp_path / 'none.json'} does not exist")
    # Dask's own flag in the fix is prose, not a setting: it stays as it is.
    assert in_flags(copy).startswith(f"--scheduler-file {tmp_path / 'none.json'} does not exist")
    assert f"`dask scheduler --scheduler-file {tmp_path / 'none.json'}`" in in_flags(copy)


def test_plain_value_errors_pass_through_unchanged():
    assert in_flags(ValueError("store x does not exist; check the rounds")) == (
        "store x does not exist; check the rounds"
    )
