"""The import contracts of pyproject.toml's [tool.importlinter] (docs/architecture.md): kept
by the tree, and broken, naming the import, by an upward import planted in a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).parent / "lint-imports")
SKIP = shutil.ignore_patterns(".*", "tests", "docs", "bench-out", "runs", "build", "*.egg-info")


def _lint(package: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package at `package` (its folder named dask_dane), its contracts."""
    env = {**os.environ, "PYTHONPATH": str(package.parent)}
    return subprocess.run(
        [LINT, "--no-cache", "--config", str(package / "pyproject.toml")],
        cwd=package, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_tree_keeps_every_contract():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


E = "dask_dane.pipeline.engine"
A = "dask_dane.pipeline.algorithms"


@pytest.mark.parametrize(
    ("module", "planted", "named"),
    [
        ("pipeline/engine/round/graph.py", "from ....cli import commands",
         f"{E}.round.graph -> dask_dane.cli.commands"),
        ("pipeline/training.py", "from .observe import tracking",
         "dask_dane.pipeline.training -> dask_dane.pipeline.observe.tracking"),
        ("pipeline/algorithms/dane.py", "import rich", f"{A}.dane -> rich"),
        # The engine imports no algorithm, setup or launcher.
        ("pipeline/engine/round/tasks.py", "from ...algorithms import dane",
         f"{E}.round.tasks -> {A}.dane"),
        ("pipeline/engine/round/graph.py", "from ...algorithms.parts import local_solver",
         f"{E}.round.graph -> {A}.parts.local_solver"),
        ("pipeline/engine/run/segments.py", "from ...launchers import jobqueue",
         f"{E}.run.segments -> dask_dane.pipeline.launchers.jobqueue"),
        ("pipeline/engine/run/driver.py", "from ...setup import run_setup",
         f"{E}.run.driver -> dask_dane.pipeline.setup.run_setup"),
        # Inside the engine: the protocol under the round, the round under the driver.
        ("pipeline/engine/protocol.py", "from .round import graph",
         f"{E}.protocol -> {E}.round.graph"),
        ("pipeline/engine/round/worker.py", "from ..run import driver",
         f"{E}.round.worker -> {E}.run.driver"),
        # Algorithms know the protocol only, and nothing of Dask.
        ("pipeline/algorithms/dane.py", "from ..engine.round import graph",
         f"{A}.dane -> {E}.round.graph"),
        ("pipeline/algorithms/fedavg.py", "import distributed", f"{A}.fedavg -> distributed"),
        # The launchers know nothing of a round.
        ("pipeline/launchers/cluster.py", "from ..engine.round import graph",
         f"dask_dane.pipeline.launchers.cluster -> {E}.round.graph"),
    ],
)  # fmt: skip
def test_a_planted_upward_import_breaks_a_contract_naming_it(tmp_path, module, planted, named):
    copy = tmp_path / "dask_dane"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    source = copy / module
    source.write_text(f"{planted}  # planted\n{source.read_text()}")

    done = _lint(copy)

    assert done.returncode != 0
    assert "BROKEN" in done.stdout and named in " ".join(done.stdout.split()), done.stdout[-3000:]
