"""RunConfig: every setting of a training run, validated before any work starts.

Precedence: built-in defaults < a TOML file (--config) < command-line flags. The resolved
configuration is written to the run directory as config.toml, and `--resume` reads it back.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALGORITHMS = ("dane", "sgd", "fedavg", "fedprox", "one-shot", "admm", "gd", "agd")
# "steps": K minibatch steps of --local-optimizer; lbfgs / cg: solve to --local-tol (convex).
LOCAL_SOLVERS = ("steps", "lbfgs", "cg")
DTYPES = ("float32", "float64")
# Where workers keep their shards and compute: auto = a GPU when the worker sees one.
DEVICES = ("auto", "cpu", "cuda")
LOCAL_OPTIMIZERS = ("sgd", "adam")
SAFEGUARDS = ("off", "backtrack", "adaptive-mu")  # DANE safeguards: algorithms/safeguard.py
# Settings that define what is being trained: a resumed run must not change them.
IDENTITY_KEYS = ("store", "model", "algorithm", "seed", "dtype")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One training run. Field names are the CLI flags with '-' written as '_'."""

    store: str | None = None  # None: the embedded default (digits, one shard per worker)
    out: str = "runs/latest"
    algorithm: str = "dane"
    model: str = "small-cnn"
    workers: int = 2
    threads_per_worker: int = 1
    rounds: int = 20
    eta: float = 1.0
    mu: float = 0.0
    local_steps: int = 30
    local_lr: float = 0.05
    local_optimizer: str = "sgd"
    local_solver: str = "steps"
    local_tol: float = 1e-10  # lbfgs / cg: stop at ||grad|| <= tol * ||grad at start||
    rho: float = 1.0  # admm: penalty of the consensus constraint
    l2: float | None = None  # L2 penalty lambda; None: the store's "l2" attribute (0 if none)
    momentum: float = 0.9
    batch_size: int = 32
    safeguard: str = "off"  # dane: off | backtrack | adaptive-mu (algorithms/safeguard.py)
    grad_sample: int = 0  # dane: rows per shard for f_i and grad f_i, fixed per run; 0: all
    seed: int = 0
    dtype: str = "float32"
    device: str = "auto"
    eval_every: int = 1
    scheduler: str | None = None
    host: str = "127.0.0.1"
    dashboard_address: str = "127.0.0.1:8787"
    timeout: float = 60.0
    # TLS for --scheduler (tls://...); None: Dask's own config (distributed.comm.tls.*).
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def validate(self) -> RunConfig:
        """Return self, or raise ValueError naming the first bad setting and its fix."""
        _choice("--algorithm", self.algorithm, ALGORITHMS)
        _choice("--dtype", self.dtype, DTYPES)
        _choice("--device", self.device, DEVICES)
        _choice("--local-optimizer", self.local_optimizer, LOCAL_OPTIMIZERS)
        _choice("--local-solver", self.local_solver, LOCAL_SOLVERS)
        if not (math.isfinite(self.local_tol) and 0 < self.local_tol < 1):
            raise ValueError(
                f"--local-tol must be in (0, 1), a relative gradient norm (got {self.local_tol}); "
                "e.g. 1e-10"
            )
        _positive("--rho", self.rho)
        _choice("--safeguard", self.safeguard, SAFEGUARDS)
        if self.safeguard != "off" and self.algorithm != "dane":
            raise ValueError(
                f"--safeguard {self.safeguard} applies to --algorithm dane only; "
                "drop it or use --algorithm dane"
            )
        if self.grad_sample and self.algorithm != "dane":
            raise ValueError(
                f"--grad-sample applies to --algorithm dane only (its gradient phase); drop it "
                f"for {self.algorithm}"
            )
        if self.grad_sample < 0:
            raise ValueError(
                f"--grad-sample must be 0 (the full shard) or a number of rows (got "
                f"{self.grad_sample})"
            )
        if self.l2 is not None and not (math.isfinite(self.l2) and self.l2 >= 0):
            raise ValueError(f"--l2 must be zero or positive (got {self.l2})")
        for flag, value in (
            ("--workers", self.workers),
            ("--threads-per-worker", self.threads_per_worker),
            ("--rounds", self.rounds),
            ("--local-steps", self.local_steps),
            ("--batch-size", self.batch_size),
            ("--eval-every", self.eval_every),
        ):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1 (got {value})")
        _positive("--eta", self.eta)
        _positive("--local-lr", self.local_lr)
        _positive("--timeout", self.timeout)
        if not (math.isfinite(self.mu) and self.mu >= 0):
            raise ValueError(f"--mu must be zero or positive (got {self.mu})")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise ValueError(f"--momentum must be in [0, 1) (got {self.momentum})")
        self._validate_tls()
        return self

    def _validate_tls(self) -> None:
        given = {
            "--tls-ca-file": self.tls_ca_file,
            "--tls-cert": self.tls_cert,
            "--tls-key": self.tls_key,
        }
        if not any(given.values()):
            return
        if not self.scheduler:
            raise ValueError(
                "--tls-ca-file, --tls-cert and --tls-key secure a connection to --scheduler; "
                "pass --scheduler tls://HOST:PORT or drop them"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together; pass both or neither")
        for flag, path in given.items():
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{flag} {path} is not a file; check the path")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {flag} {value!r}; choose one of: {', '.join(choices)}")


def _positive(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{flag} must be a positive number (got {value})")


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
    """Reject unknown keys and wrong types, naming the key; return settings with '-' as '_'."""
    types = _field_types()
    checked: dict[str, Any] = {}
    for raw_key, value in settings.items():
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


def read_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML file (top-level keys, or a [train] table)."""
    path = Path(path)
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
    """config.toml text; None values (unset optional settings) are left out."""
    lines = ["# dask-dane run configuration, as resolved when the run started"]
    for key, value in config.as_dict().items():
        if value is None:
            continue
        if isinstance(value, str):
            lines.append(f"{key} = {_toml_string(value)}")
        else:
            lines.append(f"{key} = {value!r}")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
