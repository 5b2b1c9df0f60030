"""`dane bench ...`: the benchmarks' Typer sub-app, mounted by cli/commands.py.

Each benchmark is a sub-package with its commands in its own cli.py; this module only mounts
them, in the order `dane bench --help` lists them. A command parses its options into the
benchmark's spec, runs it through the engine's public surface (the package root's API and
pipeline/__init__.py) and hands the result to common/output.py (JSON, PNG, table).
"""

from __future__ import annotations

import typer

from . import BENCH_HELP
from .convergence.cli import COMMANDS as CONVERGENCE
from .ddp.cli import COMMANDS as DDP
from .gpu.cli import COMMANDS as GPU
from .network.cli import COMMANDS as NETWORK
from .prepare.cli import COMMANDS as PREPARE
from .scaling.cli import COMMANDS as SCALING
from .soak.cli import COMMANDS as SOAK
from .startup.cli import COMMANDS as STARTUP
from .training.cli import COMMANDS as TRAINING

bench_app = typer.Typer(
    help=BENCH_HELP,
    no_args_is_help=True,
)

for commands in (CONVERGENCE, TRAINING, SOAK, SCALING, DDP, NETWORK, GPU, PREPARE, STARTUP):
    for name, command in commands.items():
        bench_app.command(name)(command)
