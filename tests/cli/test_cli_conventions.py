"""The CLI as its neighbours' read (issue 35, item 6): help without torch, `--augment none`,
`dane evaluate`'s own wording, `--device cuda` refused before a cluster starts, and a taken
dashboard port said in one line."""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from dask_dane.bench import app as bench_app
from dask_dane.cli.commands import app
from dask_dane.cli.options import bench_group
from dask_dane.pipeline.engine.round.augment import Augmentation, parse_augment
from dask_dane.pipeline.launchers import cluster_checks
from dask_dane.pipeline.setup.settings import ClusterSettings

# `dane ARGS --help` in a fresh interpreter; prints the torch modules it imported.
HELP_WITHOUT_TORCH = """
import sys
from dask_dane.cli import main
sys.argv = ["dane", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("IMPORTED", sorted(m for m in sys.modules if m.split(".")[0] == "torch"))
"""


@pytest.mark.cluster  # starts an interpreter (no Dask): the only way to see a torch-free import
@pytest.mark.parametrize(
    "args",
    [["--help"], [], ["prepare", "--help"], ["info", "--help"], ["train", "--help"],
     ["bench", "--help"], ["bench"]],
)  # fmt: skip
def test_help_does_not_import_torch(args):
    done = subprocess.run(
        [sys.executable, "-c", HELP_WITHOUT_TORCH, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert "Usage: dane" in done.stdout + done.stderr  # no arguments: the help, on stderr
    assert done.stdout.rstrip().endswith("IMPORTED []"), done.stdout[-300:]


def test_the_listing_shows_train_and_bench_built_only_when_named():
    runner = CliRunner()

    listing = runner.invoke(app, ["--help"])
    train = runner.invoke(app, ["train", "--help"])
    bench = runner.invoke(app, ["bench", "--help"])

    commands, benchmarks = listing.output.split("Commands:")[1].split("Benchmarks:")

    def names(section: str) -> list[str]:  # up to the blank line that ends it
        return [line.split()[0] for line in section.split("\n\n")[0].splitlines() if line]

    assert names(commands) == [
        "prepare", "info", "train", "options", "advise", "evaluate", "predict", "export",
        "report", "presets", "watch",
    ]  # fmt: skip
    assert names(benchmarks) == ["bench"]  # apart, under its own heading
    assert "Train a model with DANE" in listing.output
    assert train.exit_code == 0 and "--local-lr" in train.output and "[0.05]" in train.output
    assert "--install-completion" not in bench.output  # mounted under dane's settings
    assert bench.exit_code == 0 and "scaling" in bench.output


def test_bench_lists_each_command_by_its_docstring_s_first_line_and_builds_it_whole():
    declared = {}  # every bench/NAME/cli.py's COMMANDS: what `dane bench` can run
    for cli in sorted((Path(bench_app.__file__).parent).glob("*/cli.py")):
        module = importlib.import_module(f"dask_dane.bench.{cli.parent.name}.cli")
        for name, command in module.COMMANDS.items():
            declared[name] = (cli.parent.name, inspect.getdoc(command).splitlines()[0])
    group = bench_group()

    # A command added to a cli.py and not to bench/app.py (or the other way) fails here.
    assert declared == bench_app.COMMANDS
    assert list(group.commands) == list(bench_app.COMMANDS)  # the listing's order
    for name in declared:  # built, each keeps its whole help, not the listing's line
        assert group.commands[name].real().help == inspect.getdoc(bench_app.load(name))


def test_a_bench_command_s_own_help_is_whole_and_lists_its_options():
    done = CliRunner().invoke(app, ["bench", "train", "--help"])

    assert done.exit_code == 0, done.output
    assert "a running scheduler of yours" in done.output  # its docstring's second line
    assert "--config" in done.output


@pytest.mark.parametrize("given", ["none", "", "None"])
def test_augment_none_is_accepted_and_kept_as_no_augmentation(given, planned, dane_here, tmp_path):
    done = dane_here("train", "--augment", given, "--out", str(tmp_path / "run"), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert planned[0].augment == ""  # one value in config.toml, resumes and report labels
    assert parse_augment(given) == Augmentation()


def test_augment_none_does_not_mix_with_a_transform():
    with pytest.raises(ValueError, match="cannot read 'none'"):
        parse_augment("none,flip")
    assert parse_augment("flip,crop=2") == Augmentation(flip=True, crop=2)


@pytest.mark.parametrize(
    ("made", "fragment"), [(False, "is not a run directory"), (True, "no config.toml")]
)
def test_evaluate_of_no_run_names_the_fix_without_resume(made, fragment, dane_here, tmp_path):
    target = tmp_path / "NOT_A_RUN"
    if made:
        target.mkdir()

    done = dane_here("evaluate", str(target), cwd=tmp_path)

    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr
    assert fragment in lines[0] and "--out of a `dane train`" in lines[0]
    assert "--resume" not in lines[0]


def test_device_cuda_without_a_gpu_is_refused_before_anything(monkeypatch, dane_here, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "run"

    done = dane_here("train", "--device", "cuda", "--out", str(out), cwd=tmp_path)

    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: --device cuda, but torch sees no GPU")
    assert not out.exists()


def test_a_started_cluster_is_refused_before_its_start_but_a_scheduler_is_not(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    started: list[bool] = []

    with pytest.raises(ValueError, match="device=cuda, but torch sees no GPU"):
        cluster_checks.checked_start(ClusterSettings(device="cuda"), lambda: started.append(True))
    # Workers of a running scheduler may have the GPUs this machine lacks.
    cluster_checks.refuse_missing_gpu(ClusterSettings(device="cuda", scheduler="tcp://h:8786"))

    assert started == []


def test_a_taken_dashboard_port_is_one_line_of_ours(caplog):
    def start():  # as distributed/node.py warns, then the link of the port it took
        warnings.warn(
            "Port 8787 is already in use.\nPerhaps you already have a cluster running?\n"
            "Hosting the HTTP server on port 40123 instead",
            stacklevel=1,
        )
        return SimpleNamespace(dashboard_link="http://127.0.0.1:40123/status")

    with warnings.catch_warnings(record=True) as shown, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        cluster_checks.checked_start(ClusterSettings(dashboard_address="127.0.0.1:8787"), start)

    assert [w.message for w in shown] == []
    assert caplog.messages == [
        "dashboard port 8787 is taken; the dashboard is at http://127.0.0.1:40123/status"
    ]


@pytest.mark.parametrize(
    ("asked", "link"),
    [("127.0.0.1:8787", "http://127.0.0.1:8787/status"), ("127.0.0.1:0", "http://h:4/status"),
     (":8787", "")],
)  # fmt: skip
def test_a_dashboard_where_asked_says_nothing(asked, link):
    assert cluster_checks.note_dashboard_port(asked, link) is None


def test_distributed_takes_another_port_with_the_warning_we_silence(caplog):
    from distributed import LocalCluster

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = ClusterSettings(dashboard_address=f"127.0.0.1:{port}")
        with warnings.catch_warnings(record=True) as shown, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            cluster = cluster_checks.checked_start(
                settings,
                lambda: LocalCluster(
                    n_workers=0, processes=False, dashboard_address=f"127.0.0.1:{port}"
                ),
            )
            cluster.close()

    assert not [w for w in shown if "already in use" in str(w.message)]
    ours = [m for m in caplog.messages if m.startswith(f"dashboard port {port} is taken")]
    assert len(ours) == 1 and "; the dashboard is at http://" in ours[0]


@pytest.mark.parametrize("flag", ["--json", "--out"])  # --out: its former, hidden name
def test_gpu_correctness_writes_its_json_where_json_says_as_every_bench_does(
    flag, tmp_path, monkeypatch
):
    checked = {"detail": "max |dask - reference| 0", "verdict": "PASS"}
    monkeypatch.setattr("dask_dane.bench.gpu.correctness.check", lambda folder, device: checked)
    written = tmp_path / "correctness.json"

    done = CliRunner().invoke(
        app, ["bench", "gpu-correctness", "--device", "cpu", flag, str(written)]
    )
    none = CliRunner().invoke(app, ["bench", "gpu-correctness", "--device", "cpu"])

    assert done.exit_code == 0, done.output
    assert json.loads(written.read_text())["verdict"] == "PASS"
    assert "needs --json FILE" in str(none.exception)
