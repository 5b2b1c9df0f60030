"""The five sections of a run's settings (data, model, algorithm, cluster, run).

Each section is a frozen, keyword-only dataclass: a field's default is stated here once (the
CLI's help shows it from here) and its comment says what it means. Sections check their own
values and raise SettingError naming the field; the algorithm section's hyperparameters are
checked by the algorithm that uses them (algorithms/: each strategy validates its own fields
when the registry builds it). config.py joins the sections into RunConfig.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..algorithms.parts.checks import at_least_one, non_negative, one_of, positive
from ..algorithms.parts.setting_error import SettingError, setting
from ..round.augment import parse_augment
from ..round.transport import TRANSPORTS

DTYPES = ("float32", "float64")
# What the forward and backward passes compute in: fp32, or bf16 under torch.autocast with the
# weights, their gradients and every reduction kept in float32 (objective.py).
PRECISIONS = ("fp32", "bf16")
# Where workers keep their shards and compute: auto = a GPU when the worker sees one.
DEVICES = ("auto", "cpu", "cuda")
BROADCASTS = ("auto", "direct", "tree", "allgather")


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
    precision: str = "fp32"  # fp32 | bf16 (autocast; weights stay in dtype)

    def check_model(self) -> None:
        one_of(*DTYPES)("dtype", self.dtype)
        one_of(*PRECISIONS)("precision", self.precision)
        if self.precision == "bf16" and self.dtype != "float32":
            raise SettingError(
                f"{setting('precision')} bf16 keeps float32 master weights, and "
                f"{setting('dtype')} is {self.dtype}; use --dtype float32"
            )
        parse_augment(self.augment)
        if self.l2 is not None:
            non_negative("l2", self.l2)


@dataclass(frozen=True, kw_only=True)
class AlgorithmSettings:
    """The algorithm and every hyperparameter; the algorithm picks those it uses."""

    algorithm: str = "dane"
    eta: float = 1.0
    mu: float = 0.0
    local_steps: int = 30
    local_lr: float = 0.05
    local_optimizer: str = "sgd"
    local_solver: str = "steps"  # steps: K minibatch steps; lbfgs / cg: solve to local_tol
    local_tol: float = 1e-10  # lbfgs / cg: stop at ||grad|| <= tol * ||grad at start||
    rho: float = 1.0  # admm: penalty of the consensus constraint
    momentum: float = 0.9
    batch_size: int = 32
    safeguard: str = "off"  # dane: off | backtrack | adaptive-mu (algorithms/safeguard.py)
    grad_sample: int = 0  # dane: rows per shard for f_i and grad f_i, fixed per run; 0: all
    grad_sample_growth: float = 1.0  # dane: the sample grows by this factor each round
    local_theta: float = 0.0  # dane: stop a local solve at ||grad h_i|| <= theta ||g||; 0: K
    # dane: plain (the paper's g_i - eta g) | shrink (g_i - g scaled by its signal-to-noise)
    correction: str = "plain"
    server_momentum: float = 0.0  # dane, fedavg, fedprox: momentum on the averaged step
    server_lr: float = 1.0  # dane, fedavg, fedprox: w + s (mean_i v_i - w); 1: the average
    server_lr_rule: str = "fixed"  # fixed (s = server_lr) | fedexp (s from the updates' spread)
    trust_radius: float = 0.0  # dane, feddyn: every local iterate within ||v - w|| <= R; 0: none
    line_search: int = 0  # dane: try N step sizes 2, 1, 1/2, ... along the averaged step
    lr_schedule: str = "constant"  # local_lr across rounds: constant | cosine | step
    local_clip: float = 0.0  # steps solver: clip each local step's gradient to this norm; 0: off
    lr_warmup: int = 0  # steps solver: local_lr rises linearly over this many rounds; 0: none


@dataclass(frozen=True, kw_only=True)
class ClusterSettings:
    workers: int = 2
    threads_per_worker: int = 1
    device: str = "auto"
    scheduler: str | None = None
    scheduler_file: str | None = None  # what `dask scheduler --scheduler-file` wrote (HPC)
    host: str = "127.0.0.1"
    dashboard_address: str = "127.0.0.1:8787"
    # The round's shape: allgather (rounds chained on the cluster), direct or tree (each round
    # from the driver, a phase's input sent from one worker or relayed), or auto
    # (topology.chains_rounds). Results are the same bit for bit.
    broadcast: str = "auto"
    # How the all-gather form's sums travel: float32 as computed, or bfloat16 (transport.py).
    transport: str = "float32"
    timeout: float = 60.0
    # TLS for `scheduler` (tls://...); None: Dask's own config (distributed.comm.tls.*).
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def check_cluster(self) -> None:
        one_of(*DEVICES)("device", self.device)
        one_of(*BROADCASTS)("broadcast", self.broadcast)
        one_of(*TRANSPORTS)("transport", self.transport)
        if self.transport != "float32" and self.broadcast in ("direct", "tree"):
            raise SettingError(
                f"{setting('transport')} {self.transport} encodes the all-gather form's sums, "
                f"and {setting('broadcast')} is {self.broadcast}; use --broadcast allgather or auto"
            )
        at_least_one("workers", self.workers)
        at_least_one("threads_per_worker", self.threads_per_worker)
        positive("timeout", self.timeout)
        if self.scheduler_file is not None:
            if self.scheduler:
                raise SettingError(
                    f"{setting('scheduler')} and {setting('scheduler_file')} both name a "
                    "scheduler; pass one"
                )
            scheduler_file_address(self.scheduler_file)
        self._check_tls()

    def _check_tls(self) -> None:
        given = {
            "tls_ca_file": self.tls_ca_file,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
        }
        if not any(given.values()):
            return
        if not self.scheduler and not self.scheduler_file:
            raise SettingError(
                f"{setting('tls_ca_file')}, {setting('tls_cert')} and {setting('tls_key')} secure "
                f"a connection to {setting('scheduler')}; pass {setting('scheduler', 'tls://HOST:PORT')}"
                f" (or {setting('scheduler_file')}) or drop them"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SettingError(
                f"{setting('tls_cert')} and {setting('tls_key')} go together; pass both or neither"
            )
        for name, path in given.items():
            if path is not None and not Path(path).is_file():
                raise SettingError(f"{setting(name, path)} is not a file; check the path")


def scheduler_file_address(path: str) -> str:
    """The address in a Dask scheduler file; SettingError naming the problem if there is none."""
    named = setting("scheduler_file", path)
    start = f"start one with `dask scheduler --scheduler-file {path}` or check the path"
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SettingError(f"{named} does not exist; {start}") from None
    except (OSError, ValueError) as err:
        why = f"cannot be read as JSON ({type(err).__name__})"
        raise SettingError(f"{named} {why}; {start}") from None
    address = data.get("address") if isinstance(data, dict) else None
    if not isinstance(address, str) or not address:
        raise SettingError(f"{named} names no scheduler address; {start}")
    return address


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    out: str = "runs/latest"
    rounds: int = 20
    seed: int = 0
    eval_every: int = 1
    stop_at_accuracy: float = 0.0  # stop once a round's test accuracy reaches this; 0: never

    def check_run(self) -> None:
        at_least_one("rounds", self.rounds)
        at_least_one("eval_every", self.eval_every)
        if not 0.0 <= self.stop_at_accuracy <= 1.0:
            raise SettingError(
                f"{setting('stop_at_accuracy')} is a test accuracy in [0, 1] (got "
                f"{self.stop_at_accuracy}); 0 trains all {setting('rounds')}"
            )
