"""mutmut 2's hook: each mutant runs only the fast tests that execute its line.

mutmut imports this module (PYTHONPATH=tests/mutation) and calls `pre_mutation` before each
mutant. The map (coverage_map.py) lists, per file and line, the tests that ran that line; a
line no test context claims (it ran at import) falls back to the declaration tests and then
every test of the file. The
tests run in a fork of forkserver.py's warm process, slowest-to-import work done once.
Environment: DANE_MUTATION_MAP (the map's path), DANE_MUTATION_SOCKET (the server's socket),
DANE_MUTATION_SAMPLE (optional: test one mutant in N).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTEST_FLAGS = ["-x", "-q", "-p", "no:cacheprovider", "-m", "not cluster"]


@cache
def coverage_map() -> dict[str, dict[str, list[str]]]:
    return json.loads(Path(os.environ["DANE_MUTATION_MAP"]).read_text())


# Lines that run at import (decorators, fields, defaults, class attributes): the tests of a
# class's declaration first, then every test that runs the file.
DECLARATION_TESTS = ["tests/algorithms/test_algorithm_contracts.py"]


def tests_for(filename: str, line: int) -> list[str]:
    lines = coverage_map().get(Path(filename).as_posix(), {})
    if lines.get(str(line)):
        return lines[str(line)]
    # Even a file no fast test runs is imported by the declaration tests (the registry).
    return [*DECLARATION_TESTS, *lines.get("*", [])]


def sampled_out(context) -> bool:
    """DANE_MUTATION_SAMPLE=N keeps one mutant in N, chosen by a hash of where it is (file,
    line, text, index): the same mutants on every run, spread evenly over the files, so the
    score of a sample estimates the whole's at 1/N of the cost (random mutant sampling)."""
    every = int(os.environ.get("DANE_MUTATION_SAMPLE", "1"))
    mutant = context.mutation_id
    where = f"{context.filename}:{mutant.line_number}:{mutant.index}:{mutant.line}"
    return int(hashlib.sha256(where.encode()).hexdigest(), 16) % every != 0


def pre_mutation(context) -> None:
    if sampled_out(context):
        context.skip = True
        return
    tests = tests_for(context.filename, context.current_line_index + 1)
    if not tests:  # no fast test runs this file: nothing can kill the mutant
        context.config.test_command = "true"
        return
    client = [
        sys.executable,
        str(HERE / "forkserver.py"),
        "run",
        os.environ["DANE_MUTATION_SOCKET"],
    ]
    context.config.test_command = shlex.join([*client, *PYTEST_FLAGS, *tests])
