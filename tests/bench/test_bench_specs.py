"""Each bench spec holds its runs' RunConfig beside its own fields, and its command line is made
from the spec: every option's default and help come from one declaration (issue 33)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from typer.testing import CliRunner

from dask_dane.bench.common.specs import BASE, default_run, run_flags, spec_of, spec_record
from dask_dane.bench.convergence.problem import ConvergenceSpec
from dask_dane.bench.ddp.compare import CompareSpec
from dask_dane.bench.ddp.single import SingleSpec
from dask_dane.bench.ddp.spec import DdpSpec
from dask_dane.bench.gpu.precision import PrecisionSpec
from dask_dane.bench.network.spec import NetworkSpec
from dask_dane.bench.scaling.spec import ScalingSpec
from dask_dane.bench.soak.spec import SoakSpec
from dask_dane.bench.training.shards import ShardsSpec
from dask_dane.cli.commands import app
from dask_dane.pipeline.algorithms.parts.hyperparameters import with_default
from dask_dane.pipeline.setup.config import RunConfig

pytestmark = pytest.mark.bench

# (the command, its spec): the benches whose options come from a spec.
COMMANDS = [
    ("soak", SoakSpec),
    ("scaling", ScalingSpec),
    ("network", NetworkSpec),
    ("precision", PrecisionSpec),
    ("shards", ShardsSpec),
    ("single", SingleSpec),
    ("ddp", DdpSpec),
    ("ddp", CompareSpec),
    ("convergence", ConvergenceSpec),
]
WITH_A_RUN = [SoakSpec, ScalingSpec, NetworkSpec, PrecisionSpec, ShardsSpec]
RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


def _help(command: str) -> str:
    """`dane bench COMMAND --help` with no white space (its lines wrap anywhere, hyphens too)."""
    done = CliRunner().invoke(app, ["bench", command, "--help"])
    assert done.exit_code == 0, done.output
    return _bare(done.output)


def _bare(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("spec_type", WITH_A_RUN, ids=lambda t: t.__name__)
def test_a_spec_with_runs_holds_one_run_config_and_flags_that_name_its_fields(spec_type):
    names = {f.name for f in dataclasses.fields(spec_type)}
    assert "run" in names
    assert set(run_flags(spec_type)) <= set(RUN_FIELDS)
    # A flag sets either the run or the spec's own field, never both.
    assert not set(run_flags(spec_type)) & (names - {"run"})
    if spec_type is not ShardsSpec:  # its run comes from --config
        run = default_run(spec_type)
        # The bench's defaults differ from BASE only where the bench says so.
        assert isinstance(run, RunConfig) and run.dashboard_address == BASE.dashboard_address


@pytest.mark.parametrize(
    ("command", "spec_type"), COMMANDS, ids=lambda x: getattr(x, "__name__", x)
)
def test_every_option_shows_the_default_and_help_its_spec_declares(command, spec_type):
    shown = _help(command)
    run = default_run(spec_type) if run_flags(spec_type) else None
    helps = getattr(spec_type, "RUN_HELP", {})
    for name in run_flags(spec_type):
        flag = f"--{name.replace('_', '-')}"
        text = helps.get(name) or RUN_FIELDS[name].metadata["declaration"].help
        if name not in getattr(spec_type, "REQUIRED", ()):
            text = with_default(text, getattr(run, name))
        assert f"{flag}<" in shown and _bare(text) in shown, (flag, text)
    for f in dataclasses.fields(spec_type):
        if "help" not in f.metadata:
            continue
        flag = f.metadata["flag"] or f"--{f.name.replace('_', '-')}"
        assert f"{flag}<" in shown or f"{flag}/" in shown, flag
        assert _bare(f.metadata["help"].removesuffix(".")) in shown, f.name


def test_flags_reach_the_run_and_the_spec_and_the_record_keeps_the_flat_layout():
    spec = spec_of(SoakSpec, rounds=70, warmup=10, model="linear", workdir="w")

    assert (spec.run.rounds, spec.run.model, spec.warmup, spec.workdir) == (70, "linear", 10, "w")
    # Unnamed: the bench's defaults, then BASE's.
    assert spec.run.local_steps == 5 and spec.run.batch_size == BASE.batch_size
    record = spec_record(spec)
    assert record == {"rounds": 70, "workers": 2, "algorithm": "dane", "model": "linear",
                      "local_steps": 5, "seed": 0, "collective": "dask", "warmup": 10,
                      "workdir": "w"}  # fmt: skip


def test_a_command_line_flag_reaches_the_spec_it_runs(monkeypatch, tmp_path):
    import dask_dane.bench.soak.run as soak_run

    seen = []

    def fake_soak(spec, log):
        seen.append(spec)
        return {"spec": spec_record(spec)}

    monkeypatch.setattr(soak_run, "run_soak", fake_soak)
    monkeypatch.setattr(soak_run, "markdown_table", lambda result: "table")
    args = ["bench", "soak", "--rounds", "45", "--warmup", "12", "--local-steps", "2",
            "--workdir", str(tmp_path)]  # fmt: skip
    done = CliRunner().invoke(app, args)

    assert done.exit_code == 0, done.output
    (spec,) = seen
    assert (spec.run.rounds, spec.run.local_steps, spec.warmup) == (45, 2, 12)
    assert spec.workdir == str(tmp_path) and spec.run.model == "mlp"


def test_a_comma_separated_flag_becomes_the_tuple_its_field_holds(monkeypatch):
    import dask_dane.bench.convergence.run as convergence_run

    seen = []
    monkeypatch.setattr(convergence_run, "run_convergence",
                        lambda spec, **kw: seen.append(spec) or {"cells": []})  # fmt: skip
    args = ["bench", "convergence", "--machines", "2,8", "--mu", "0,0.5", "--algorithms",
            "dane, gd", "--rounds", "3"]  # fmt: skip
    CliRunner().invoke(app, args)

    (spec,) = seen
    assert (spec.machines, spec.mus, spec.algorithms) == ((2, 8), (0.0, 0.5), ("dane", "gd"))
    assert spec.samples == ConvergenceSpec().samples


def test_a_list_that_is_not_numbers_is_one_line_naming_its_flag(
    run_cli, assert_one_line_error, capfd
):
    status = run_cli(["bench", "convergence", "--machines", "4,many"])

    assert_one_line_error(status, capfd, ["--machines must be a comma-separated list of integers"])


@pytest.mark.parametrize("flag", ["--local-lr", "--lr"])
@pytest.mark.parametrize("command", ["single", "ddp"])
def test_the_step_size_is_named_local_lr_as_train_names_it_and_lr_still_reads(
    command, flag, monkeypatch
):
    seen: dict[str, dict] = {}

    def capture(spec_type, **flags):
        seen[spec_type.__name__] = flags
        raise SystemExit(0)  # the spec is all this test wants: no run

    monkeypatch.setattr("dask_dane.bench.common.options.spec_of", capture)
    done = CliRunner().invoke(app, ["bench", command, "--store", "s.zarr", flag, "0.125"])

    assert done.exit_code == 0, done.output
    (flags,) = seen.values()
    assert flags["lr"] == 0.125
    assert "--local-lr<float>" in _help(command) and "--lr<" not in _help(command)  # hidden
