"""Which fast tests run each line of the mutated files: the map that picks a mutant's tests.

`python tests/mutation/coverage_map.py OUT.json [PYTEST ARGS]` runs the fast tests once under
coverage with one context per test, then writes {file: {line: [test ids]}} for the files
mutmut mutates. A mutant of line L can change nothing unless L runs, so the tests that run L
are the only ones that can kill it; mutmut_config.py runs exactly those, fastest first (with
`-x` a killed mutant stops at its first failing test). Lines that run at import (class
bodies, field defaults) are recorded under every test that imports the module first, so they
map to the whole file's tests instead (key "*").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import coverage

# The files of the Makefile's MUTATE: keep the two lists the same.
MUTATED = (
    "pipeline/algorithms/",
    "pipeline/engine/round/comm.py",
    "pipeline/engine/round/aggregate.py",
    "models/user.py",
    "pipeline/setup/model_check.py",
    "pipeline/engine/round/objective.py",
    "pipeline/engine/round/augment.py",
    "datasets/images.py",
    "datasets/cifar.py",
    "pipeline/trained.py",
)
COVERED = ["--cov=pipeline", "--cov=models", "--cov=datasets"]  # every folder MUTATED names
FLAGS = ["-q", "-p", "no:cacheprovider", "-m", "not cluster", *COVERED]


def run_fast_tests(data_file: Path, junit: Path, pytest_args: list[str]) -> None:
    command = [sys.executable, "-m", "pytest", *FLAGS, "--cov-context=test", "--cov-report="]
    command += [f"--junitxml={junit}", *pytest_args]
    # A failing test still covers lines: the map wants what ran, not what passed.
    subprocess.run(command, check=False, env={**os.environ, "COVERAGE_FILE": str(data_file)})


def test_id(context: str) -> str:
    """pytest-cov names contexts 'tests/x.py::test|run': the node id without the phase."""
    return context.rsplit("|", 1)[0]


def durations(junit: Path) -> dict[str, float]:
    """Seconds per test id, from pytest's JUnit XML (classname 'tests.test_x', name 'test')."""
    times = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        times[f"{module}.py::{case.get('name')}"] = float(case.get("time", 0.0))
    return times


def build_map(data_file: Path, root: Path, times: dict[str, float]) -> dict:
    data = coverage.CoverageData(basename=str(data_file))
    data.read()

    def fastest_first(tests: set[str]) -> list[str]:
        return sorted(tests, key=lambda test: (times.get(test, 60.0), test))

    result: dict[str, dict[str, list[str]]] = {}
    for measured in data.measured_files():
        relative = Path(measured).resolve().relative_to(root.resolve()).as_posix()
        if not relative.startswith(MUTATED):
            continue
        by_line = data.contexts_by_lineno(measured)
        lines = {
            str(n): fastest_first({test_id(c) for c in ctx if c}) for n, ctx in by_line.items()
        }
        lines["*"] = fastest_first({t for tests in lines.values() for t in tests})
        result[relative] = lines
    return result


def check_ids_collect(mapping: dict) -> None:
    """Every test id in the map must collect on the unmutated tree: then a mutant's "no such
    test" from pytest can only mean the mutant broke a test module's import (a kill)."""
    ids = sorted({test for lines in mapping.values() for tests in lines.values() for test in tests})
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", *ids]
    if subprocess.run(command, check=False, capture_output=True).returncode != 0:
        raise SystemExit("some test ids of the map do not collect: rebuild it on a clean tree")


def main() -> None:
    out = Path(sys.argv[1])
    data_file, junit = out.with_suffix(".coverage"), out.with_suffix(".junit.xml")
    run_fast_tests(data_file, junit, sys.argv[2:])
    mapping = build_map(data_file, Path.cwd(), durations(junit))
    check_ids_collect(mapping)
    out.write_text(json.dumps(mapping, indent=1, sort_keys=True))
    print(f"{out}: {len(mapping)} files")


if __name__ == "__main__":
    main()
