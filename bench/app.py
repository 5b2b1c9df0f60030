"""`dane bench ...`: the benchmarks' commands by name, each imported only when it runs.

Each benchmark is a sub-package with its commands in its own cli.py (its COMMANDS). Those
import their specs, and the specs torch and the engine: seconds, which `dane bench --help`
need not wait for. So this module names every command, in the order `dane bench --help`
lists them, with its benchmark and the first line of its docstring (what the listing
shows); cli/options.py builds the `dane bench` group from COMMANDS, and `load` imports a
command's cli.py only when that command runs or shows its own --help. A new command goes
into its cli.py's COMMANDS and here: tests/cli/test_cli_conventions.py fails on one without the
other, or on a line that is not its docstring's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# name: (its benchmark's sub-package, the first line of its docstring)
COMMANDS: dict[str, tuple[str, str]] = {
    "convergence": (
        "convergence",
        "DANE's convergence against m, N and mu (Shamir et al. 2014, section 7), with baselines.",
    ),
    "train": (
        "training",
        "Training-quality runs (e.g. CNNs on real data), one after another on one cluster:",
    ),
    "shards": (
        "training",
        "The same data split over 1, 2, 4... shards, one configuration: is accuracy kept?",
    ),
    "defaults": (
        "training",
        "Which settings a first run survives: candidates on networks with and without",
    ),
    "local-steps": (
        "training",
        "More local work a round against fewer rounds: DANE (defaults and mu = 0) and FedAvg at",
    ),
    "skew-summary": (
        "training",
        "The skewed-shard races summed up: per store, each method at its best learning rate.",
    ),
    "correction-noise": (
        "training",
        "How much of DANE's correction is signal: the true correction against the error a",
    ),
    "soak": (
        "soak",
        "Many rounds on a small store: memory, leftover tasks and round times must stay flat.",
    ),
    "scaling": (
        "scaling",
        "Strong scaling: the same data and work on 1, 2, 4... workers, each round taken apart.",
    ),
    "collective": (
        "collective",
        "The Dask graph's rounds against a gloo group's, in one run: fixed costs, a round at",
    ),
    "collective-crossover": (
        "collective",
        "Where a gloo all-gather stops beating a Dask hop: both timed at each size, 2 workers.",
    ),
    "time-to-accuracy": (
        "scaling",
        "Each method's time to target on m workers, projected from a shards sweep.",
    ),
    "headline": (
        "headline",
        "The time to accuracy as workers double: DANE against FedAvg and DDP, on 1 ... 8 shards.",
    ),
    "memory": (
        "scaling",
        "Worker memory and images/s with shards held converted (float), resident (as stored)",
    ),
    "wire": (
        "scaling",
        "A round's tensors sent in-band or as Dask frames, at ResNet-18 and small-cnn size.",
    ),
    "ddp": (
        "ddp",
        "PyTorch DDP, one process and dask-dane's methods on the same shards, side by side.",
    ),
    "single": (
        "ddp",
        "One process, plain PyTorch: the same model, data and weights, no Dask (the baseline).",
    ),
    "network": (
        "network",
        "Every method on real links: workers in network namespaces behind shaped veth links.",
    ),
    "gpu-correctness": (
        "gpu",
        "DANE on L2-regularised logistic regression in float64: Dask on DEVICE against the",
    ),
    "precision": (
        "gpu",
        "One process's time a local step in fp32, in bf16 (--precision) and in plain PyTorch.",
    ),
    "local-step": (
        "local_step",
        "A worker's local step beside a plain PyTorch loop: the same model, rows and optimizer.",
    ),
    "prepare-memory": (
        "prepare",
        "Peak memory of `dane prepare SOURCE` at each size (1x, 10x, 100x the synthetic",
    ),
    "cli-startup": (
        "startup",
        "How long `dane --help`, `dane train --help` and `dane bench --help` take in a fresh",
    ),
}


def load(name: str) -> Callable[..., Any]:
    """Command `name`'s function, from its benchmark's cli.py (which imports torch)."""
    package, _ = COMMANDS[name]
    return importlib.import_module(f"{__package__}.{package}.cli").COMMANDS[name]
