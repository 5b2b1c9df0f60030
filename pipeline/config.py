"""RunConfig: every setting of a training run, validated before any work starts.

Settings come in five sections (data, model, algorithm, cluster, run), each a frozen dataclass
that checks its own values. RunConfig joins them into one flat, keyword-only dataclass whose
field names are the `dane train` flags with '-' written as '_': a flag, its TOML key and its
field are one name. The algorithm section's hyperparameters are checked by the algorithm that
uses them (algorithms/: each strategy validates its own fields when the registry builds it).

Precedence: built-in defaults < a TOML file (--config) < command-line flags. The resolved
configuration is written to the run directory as config.toml, one [table] per section, and
`--resume` reads it back; flat keys, as older files hold them, read the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import presets
from .algorithms import Strategy, make_strategy
from .augment import parse_augment

DTYPES = ("float32", "float64")
# Where workers keep their shards and compute: auto = a GPU when the worker sees one.
DEVICES = ("auto", "cpu", "cuda")
# Settings that define what is being trained: a resumed run must not change them.
IDENTITY_KEYS = ("store", "model", "algorithm", "seed", "dtype")


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    store: str | None = None  # None: the embedded default (digits, one shard per worker)


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    model: str = "small-cnn"
    dtype: str = "float32"
    l2: float | None = None  # L2 penalty lambda; None: the store's "l2" attribute (0 if none)
    # Random flips and crops of every local step's minibatch: flip, crop=P, or flip,crop=P.
    augment: str = ""

    def check_model(self) -> None:
        _choice("--dtype", self.dtype, DTYPES)
        parse_augment(self.augment)
        if self.l2 is not None and not (math.isfinite(self.l2) and self.l2 >= 0):
            raise ValueError(f"--l2 must be zero or positive (got {self.l2})")


@dataclass(frozen=True, kw_only=True)
class AlgorithmSettings:
    """The algorithm and every hyperparameter flag; the algorithm picks those it uses."""

    algorithm: str = "dane"
    eta: float = 1.0
    mu: float = 0.0
    local_steps: int = 30
    local_lr: float = 0.05
    local_optimizer: str = "sgd"
    local_solver: str = "steps"  # steps: K minibatch steps; lbfgs / cg: solve to --local-tol
    local_tol: float = 1e-10  # lbfgs / cg: stop at ||grad|| <= tol * ||grad at start||
    rho: float = 1.0  # admm: penalty of the consensus constraint
    momentum: float = 0.9
    batch_size: int = 32
    safeguard: str = "off"  # dane: off | backtrack | adaptive-mu (algorithms/safeguard.py)
    grad_sample: int = 0  # dane: rows per shard for f_i and grad f_i, fixed per run; 0: all
    grad_sample_growth: float = 1.0  # dane: the sample grows by this factor each round
    local_theta: float = 0.0  # dane: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K
    server_momentum: float = 0.0  # dane, fedavg, fedprox: momentum on the averaged step
    trust_radius: float = 0.0  # dane, feddyn: every local iterate within ||v - w|| <= R; 0: none
    line_search: int = 0  # dane: try N step sizes 2, 1, 1/2, ... along the averaged step
    lr_schedule: str = "constant"  # --local-lr across rounds: constant | cosine | step
    local_clip: float = 0.0  # steps solver: clip each local step's gradient to this norm; 0: off


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    workers: int = 2
    threads_per_worker: int = 1
    device: str = "auto"
    scheduler: str | None = None
    scheduler_file: str | None = None  # what `dask scheduler --scheduler-file` wrote (HPC)
    host: str = "127.0.0.1"
    dashboard_address: str = "127.0.0.1:8787"
    # How a phase's input reaches the workers: direct (all from one), tree (relayed), or auto
    # (tree from graph.TREE_FROM_WORKERS workers on). Results are the same bit for bit.
    broadcast: str = "auto"
    timeout: float = 60.0
    # TLS for --scheduler (tls://...); None: Dask's own config (distributed.comm.tls.*).
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def check_cluster(self) -> None:
        _choice("--device", self.device, DEVICES)
        _choice("--broadcast", self.broadcast, ("auto", "direct", "tree"))
        _at_least_one(
            ("--workers", self.workers), ("--threads-per-worker", self.threads_per_worker)
        )
        _positive("--timeout", self.timeout)
        if self.scheduler_file is not None:
            if self.scheduler:
                raise ValueError("--scheduler and --scheduler-file both name a scheduler; pass one")
            scheduler_file_address(self.scheduler_file)
        given = {
            "--tls-ca-file": self.tls_ca_file,
            "--tls-cert": self.tls_cert,
            "--tls-key": self.tls_key,
        }
        if not any(given.values()):
            return
        if not self.scheduler and not self.scheduler_file:
            raise ValueError(
                "--tls-ca-file, --tls-cert and --tls-key secure a connection to --scheduler; "
                "pass --scheduler tls://HOST:PORT (or --scheduler-file) or drop them"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together; pass both or neither")
        for flag, path in given.items():
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{flag} {path} is not a file; check the path")


def scheduler_file_address(path: str) -> str:
    """The address in a Dask scheduler file; ValueError naming the problem if there is none."""
    start = f"start one with `dask scheduler --scheduler-file {path}` or check the path"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"--scheduler-file {path} does not exist; {start}") from None
    except (OSError, ValueError) as err:
        why = f"cannot be read as JSON ({type(err).__name__})"
        raise ValueError(f"--scheduler-file {path} {why}; {start}") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        raise ValueError(f"--scheduler-file {path} names no scheduler address; {start}")
    return address


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    out: str = "runs/latest"
    rounds: int = 20
    seed: int = 0
    eval_every: int = 1
    stop_at_accuracy: float = 0.0  # stop once a round's test accuracy reaches this; 0: never

    def check_run(self) -> None:
        _at_least_one(("--rounds", self.rounds), ("--eval-every", self.eval_every))
        if not 0.0 <= self.stop_at_accuracy <= 1.0:
            raise ValueError(
                f"--stop-at-accuracy is a test accuracy in [0, 1] (got {self.stop_at_accuracy}); "
                "0 trains all --rounds"
            )


# The sections in the order config.toml lists them; their fields are RunConfig's.
SECTIONS: dict[str, type] = {
    "data": DataSettings,
    "model": ModelSettings,
    "algorithm": AlgorithmSettings,
    "cluster": ClusterSettings,
    "run": RunSettings,
}


@dataclass(frozen=True, kw_only=True)
class RunConfig(RunSettings, ClusterSettings, AlgorithmSettings, ModelSettings, DataSettings):
    """One training run: every section's fields, flat (field names are the CLI flags)."""

    def validate(self) -> RunConfig:
        """Return self, or raise ValueError naming the first bad setting and its fix."""
        self.strategy()  # the algorithm checks its own hyperparameters
        self.check_model()
        self.check_cluster()
        self.check_run()
        return self

    def strategy(self) -> Strategy:
        """The algorithm with its hyperparameters (algorithms/ registry)."""
        return make_strategy(self.algorithm, self.as_dict())

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def section_of(key: str) -> str:
    """The section a RunConfig field belongs to."""
    return next(
        name for name, cls in SECTIONS.items() if key in {f.name for f in dataclasses.fields(cls)}
    )


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {flag} {value!r}; choose one of: {', '.join(choices)}")


def _positive(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a positive number (got {value})")


def _at_least_one(*flags: tuple[str, int]) -> None:
    for flag, value in flags:
        if value < 1:
            raise ValueError(f"{flag} must be at least 1 (got {value})")


def _field_types() -> dict[str, tuple[type, ...]]:
    """Accepted TOML value types per field (ints are accepted where floats are)."""
    types: dict[str, tuple[type, ...]] = {}
    for f in dataclasses.fields(RunConfig):
        text = str(f.type)
        if "float" in text:
            types[f.name] = (int, float)
        elif "int" in text:
            types[f.name] = (int,)
        else:
            types[f.name] = (str,)
    return types


def check_settings(settings: dict[str, Any], origin: str) -> dict[str, Any]:
    """Reject unknown keys and wrong types, naming the key; return flat settings, '-' as '_'.

    Keys may stand at the top level or in their section's table ([algorithm] eta = 1).
    """
    types = _field_types()
    checked: dict[str, Any] = {}
    for raw_key, value in _flatten(settings, origin).items():
        key = raw_key.replace("-", "_")
        if key not in types:
            raise ValueError(
                f"{origin}: unknown key {raw_key!r}; known keys: {', '.join(sorted(types))}"
            )
        if isinstance(value, bool) or not isinstance(value, types[key]):
            expected = " or ".join(t.__name__ for t in types[key])
            raise ValueError(
                f"{origin}: key {raw_key!r} must be {expected}, got {type(value).__name__}"
            )
        checked[key] = float(value) if float in types[key] else value
    return checked


def _flatten(settings: dict[str, Any], origin: str) -> dict[str, Any]:
    """Section tables merged into one flat table; a key in the wrong section is an error.

    `model` and `algorithm` name both a section and a setting: a table is the section.
    """
    flat: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in SECTIONS or (not isinstance(value, dict) and name in _field_types()):
            flat[name] = value
            continue
        if not isinstance(value, dict):
            raise ValueError(f"{origin}: {name!r} must be a table ([{name}]) of settings")
        for raw_key, setting in value.items():
            key = raw_key.replace("-", "_")
            if key in _field_types() and section_of(key) != name:
                raise ValueError(
                    f"{origin}: key {raw_key!r} belongs in [{section_of(key)}], not [{name}]"
                )
            flat[raw_key] = setting
    return flat


def read_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys, section tables, or a [train] table);
    `preset:NAME` names a shipped preset."""
    path = presets.resolve(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist; check the --config path") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config file {path} is not valid TOML ({err}); fix the file") from None
    if isinstance(data.get("train"), dict):
        data = data["train"]
    return check_settings(data, str(path))


def resolve_config(
    *, file: str | Path | None, flags: dict[str, Any], base: dict[str, Any] | None = None
) -> RunConfig:
    """Defaults < `base` (a resumed run's saved settings) < the TOML file < flags given.

    A flag whose value is None was not given on the command line.
    """
    settings = dict(base or {})
    settings.update(read_toml(file) if file else {})
    settings.update({k: v for k, v in flags.items() if v is not None})
    return RunConfig(**settings).validate()


def to_toml(config: RunConfig) -> str:
    """config.toml text, one table per section; None values (unset settings) are left out."""
    lines = ["# dask-dane run configuration, as resolved when the run started"]
    for name, section in SECTIONS.items():
        lines.append(f"\n[{name}]")
        for f in dataclasses.fields(section):
            value = getattr(config, f.name)
            if value is None:
                continue
            text = _toml_string(value) if isinstance(value, str) else repr(value)
            lines.append(f"{f.name} = {text}")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
