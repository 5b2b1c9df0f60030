"""The README's quick start is what CI runs, and each of its commands parses in make's shell.

A recipe line is handed to /bin/sh whole, so a syntax error in a branch that does not run
still fails the target: `make -n TARGET | sh -n` finds it without running anything.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.cluster  # starts make and sh


def quick_start_commands(readme: str) -> list[str]:
    """The commands of the README's first ```bash block, comments stripped."""
    block = re.search(r"^```bash\n(.*?)^```", readme, flags=re.M | re.S)
    assert block, "README.md has no ```bash block"
    lines = (line.split("#", 1)[0].strip() for line in block.group(1).splitlines())
    return [line for line in lines if line]


def parse_in_make_shell(target: str, **variables: str) -> subprocess.CompletedProcess:
    """Print TARGET's recipe without running it, and parse it with the shell make uses."""
    env = {k: v for k, v in os.environ.items() if k not in ("BESIDE_PURE_PASS", "MAKEFLAGS")}
    env.update(variables)
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=REPO, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return subprocess.run(["/bin/sh", "-n"], input=printed.stdout, capture_output=True, text=True)


def test_the_readme_quick_start_is_make_train_then_make_test():
    commands = quick_start_commands((REPO / "README.md").read_text())

    assert commands == ["make train", "make test"]


@pytest.mark.parametrize("target", ["train", "test"])
def test_each_quick_start_target_parses_as_a_user_runs_it(target):
    parsed = parse_in_make_shell(target)

    assert parsed.returncode == 0, parsed.stderr


def test_the_test_target_parses_with_a_command_beside_the_pure_pass():
    parsed = parse_in_make_shell("test", BESIDE_PURE_PASS="echo 'a quoted word' \"and more\"")

    assert parsed.returncode == 0, parsed.stderr


def test_ci_runs_the_quick_start_lines_as_written_and_in_order():
    commands = quick_start_commands((REPO / "README.md").read_text())
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]

    positions = [ci_lines.index(command) for command in commands]

    assert positions == sorted(positions)


def test_a_recipe_that_pastes_an_empty_variable_into_a_subshell_is_caught(tmp_path):
    # The form the test target had: `( $(VAR) )` behind an `if`, VAR empty.
    (tmp_path / "Makefile").write_text(
        "VAR ?=\nt:\n\t@if [ -n '$(VAR)' ]; then ( $(VAR) ) > /dev/null & fi; echo ok\n"
    )
    printed = subprocess.run(
        ["make", "-n", "-C", str(tmp_path), "--no-print-directory", "t"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip

    parsed = subprocess.run(["/bin/sh", "-n"], input=printed.stdout, capture_output=True, text=True)

    assert parsed.returncode != 0
