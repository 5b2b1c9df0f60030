"""The seven sections of a run's settings (data, model, algorithm, solver, server, cluster, run).

Each section is a frozen, keyword-only dataclass. A field is declared once with its default
and its help text (`declare`; the CLI's flags and help, the TOML keys and the API's keywords
are made from it). Sections check their own values and raise SettingError naming the field.
The algorithm, solver and server sections are generated: their fields are the
hyperparameters the algorithms and their parts declare where they use them
(algorithms.SETTINGS), each checked by its declared rule. config.py joins the sections into
RunConfig.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..algorithms import ALGORITHMS, SETTINGS
from ..algorithms.parts.checks import (
    at_least_one,
    non_negative,
    one_of,
    optional,
    positive,
)
from ..algorithms.parts.hyperparameters import declare
from ..algorithms.parts.setting_error import SettingError, setting
from ..engine.round.augment import NO_AUGMENTATION, parse_augment
from ..engine.round.transport import TRANSPORTS
from .job_settings import JobSettings, check_bytes, scheduler_file_address
from .run_settings import RunSettings

# `--broadcast`: a Dask graph's round crosses by all-gather, whatever is named; the setting
# stays so that older config files, scripts and resumed runs read.
BROADCASTS = ("auto", "allgather")
# What older config files may hold: the reduce collective (one worker finished each phase and
# sent it back out) and the per-round form's `direct` and `tree`. Each reads as `auto` with a
# note (read_broadcast): all-gather costs less at every size, and sums in the same order.
FORMER_BROADCASTS = ("reduce", "direct", "tree")


def read_broadcast(value: str) -> tuple[str, str | None]:
    """A `--broadcast` value as it runs now, and for a former one a note saying so (None for
    a current value). The caller names where the value came from."""
    if value not in FORMER_BROADCASTS:
        return value, None
    return "auto", (
        "is no longer a separate collective: rounds cross by all-gather, which measured "
        "faster at every size; the weights are the same bit for bit"
    )


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    store: str | None = declare(None, help="Store to train on (default: embedded digits).")


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    model: str = declare(
        "small-cnn",
        help="A built-in name: small-cnn | lenet | compact-cnn | cnn1d | resnet8 | mlp | "
        "linear | logistic; or your own: FILE.py:NAME or package.module:NAME, a callable "
        "returning an nn.Module, called with whichever of sample_shape, in_channels, "
        "num_classes it names (torchvision.models:resnet18 works as it is).",
    )
    dtype: str = declare("float32", one_of("float32", "float64"), help="float32 | float64.")
    # None: the store's "l2" attribute (0 if none)
    l2: float | None = declare(
        None, optional(non_negative), help="L2 penalty lambda (default: the store's l2, else 0)."
    )
    augment: str = declare(
        "",
        help="Images: random flips and crops of each local minibatch: flip | crop=P | "
        "flip,crop=P (pad P, crop back) | none.",
    )
    # What the forward and backward passes compute in: fp32, or bf16 under torch.autocast
    # with the weights, their gradients and every reduction kept in float32 (objective.py).
    precision: str = declare(
        "fp32",
        one_of("fp32", "bf16"),
        help="fp32 | bf16: bf16 computes the layers in bfloat16 (torch.autocast, on GPUs and on "
        "CPU) with float32 weights, gradients and sums; needs --dtype float32.",
    )

    def __post_init__(self) -> None:
        # "none" (the default as --help shows it) and "" are one setting, kept as "": one
        # value in config.toml, in a resume's comparison and in report labels.
        if isinstance(self.augment, str) and self.augment.strip().lower() == NO_AUGMENTATION:
            object.__setattr__(self, "augment", "")

    def check_model(self) -> None:
        """The checks across fields; each field's own rule is declared with it."""
        if self.precision == "bf16" and self.dtype != "float32":
            raise SettingError(
                f"{setting('precision')} bf16 keeps float32 master weights, and "
                f"{setting('dtype')} is {self.dtype}; use --dtype float32"
            )
        parse_augment(self.augment)


# The algorithm's settings in three sections (and their --help panels): a local solver's, the
# server step's, and the rest. Each holds the settings of the classes whose SECTION names it
# (the algorithms and their other parts name none), so a new part's settings land in its own.
GENERATED = {"algorithm": "Algorithm", "solver": "Local solver", "server": "Server step"}


def _generated(section: str) -> type:
    """A generated section: a fresh field of each declaration there (the default, rule and
    help are that declaration's); the algorithm section leads with `algorithm` itself."""
    fields = []
    if section == "algorithm":
        fields.append(("algorithm", str, declare("dane", help=" | ".join(ALGORITHMS) + ".")))
    fields += [
        (name, gathered.type, gathered.declaration.field())
        for name, gathered in SETTINGS.items()
        if getattr(gathered.owner, "SECTION", "algorithm") == section
    ]
    return dataclasses.make_dataclass(
        f"{section.title()}Settings",
        fields,
        frozen=True,
        kw_only=True,
        namespace={"__module__": __name__, "__doc__": f"The [{section}] settings."},
    )


AlgorithmSettings = _generated("algorithm")
SolverSettings = _generated("solver")
ServerSettings = _generated("server")


@dataclass(frozen=True, kw_only=True)
class ClusterSettings(JobSettings):  # --cluster and the job settings first
    workers: int = declare(2, at_least_one, help="Workers of a started cluster.")
    threads_per_worker: int = declare(1, at_least_one, help="Threads per worker.")
    # Where workers keep their shards and compute: auto = a GPU when the worker sees one.
    device: str = declare(
        "auto",
        one_of("auto", "cpu", "cuda"),
        help="auto (a GPU where a worker sees one) | cpu | cuda.",
    )
    # None: Dask's own (the machine's memory split over the workers); what --shard-memory
    # auto measures a shard against, and where a worker's nanny restarts it.
    memory_limit: str | None = declare(
        None,
        optional(check_bytes),
        help="Memory limit of each worker of a started cluster, e.g. 2GiB (Dask's: the "
        "machine's memory over --workers).",
    )
    # auto by default: a run whose data fits is held resident, as before, and one whose data
    # does not fit streams what does not, instead of stopping to ask for the flag. How workers
    # hold their shards: in memory, or streamed from the store (rows/streamed.py).
    shard_memory: str = declare(
        "auto",
        one_of("resident", "converted", "stream", "auto"),
        help="auto (stream the training shards when one exceeds a quarter of a worker's "
        "memory limit; on each worker, hold its part of the validation rows and the test split "
        "where they fit in what its shards leave of that quarter, stream the rest) | resident "
        "(each shard read once and held as stored: uint8 images stay uint8) | converted (held "
        "in the run's dtype, normalised: 4x a uint8 store's bytes, no per-batch conversion) | "
        "stream (every split read from the store a chunk at a time). Streamed shards draw "
        "minibatches from a window of chunks: other draws than a resident run's, so the "
        "weights differ; full passes (gradients, evaluation) give the same numbers.",
    )
    scheduler: str | None = declare(None, help="Address of a running Dask scheduler to use.")
    # What `dask scheduler --scheduler-file` wrote (HPC).
    scheduler_file: str | None = declare(
        None, help="A running scheduler's `--scheduler-file` (jobqueue)."
    )
    host: str = declare("127.0.0.1", help="Interface a started cluster binds.")
    dashboard_address: str = declare("127.0.0.1:8787", help="Dashboard address.")
    # Kept for older config files and scripts: a Dask graph's round is an all-gather
    # (transport.py); a former value reads as auto, with a note (read_broadcast).
    broadcast: str = declare(
        "auto",
        help="auto | allgather: how a Dask graph's round crosses (every worker takes every "
        "worker's sums and finishes each phase itself). Kept for older config files; reduce, "
        "direct and tree read as auto, with a note.",
    )
    # How a round's sums cross between workers (run/segments.py): a Dask graph per round, or
    # a torch.distributed group over the same workers, rounds chained inside one task each.
    collective: str = declare(
        "auto",
        one_of("auto", "dask", "torch"),
        help="dask (a Dask task graph per round) | torch (a gloo group over the Dask workers, "
        "rounds chained inside one task per worker: a round's fixed cost a fraction of a "
        "Dask hop) | auto (torch for a model of at most 4 MiB, dask above it). The same "
        "weights bit for bit.",
    )
    collective_timeout: float = declare(
        60.0,
        positive,
        help="--collective torch: seconds an all-gather waits for a lost or frozen worker, "
        "beyond 4x the phase's own compute on the waiting worker; then the round runs again "
        "on the workers left.",
    )
    # How the workers' sums travel (transport.py).
    transport: str = declare(
        "float32",
        one_of(*TRANSPORTS),
        help="float32 | bfloat16: how the workers' sums travel; bfloat16 sends the local "
        "solutions as their change from w, half the bytes, summed in float32.",
    )
    timeout: float = declare(
        60.0,
        positive,
        help="Seconds to wait for a cluster, or a silent scheduler, before stopping.",
    )
    # TLS for `scheduler` (tls://...); None: Dask's own config (distributed.comm.tls.*).
    tls_ca_file: str | None = declare(None, help="--scheduler tls://...: CA certificate (PEM).")
    tls_cert: str | None = declare(None, help="--scheduler tls://...: client certificate (PEM).")
    tls_key: str | None = declare(None, help="--scheduler tls://...: client private key (PEM).")

    def check_cluster(self) -> None:
        """The checks across fields; each field's own rule is declared with it."""
        # A former value is read as auto where settings are read (config.check_settings, and
        # plan.py for flags); a RunConfig built with one directly runs the all-gather too.
        if self.broadcast not in FORMER_BROADCASTS:
            one_of(*BROADCASTS)("broadcast", self.broadcast)
        self.check_jobs(scheduler_named=bool(self.scheduler or self.scheduler_file))
        if self.cluster != "local" and self.memory_limit is not None:
            raise SettingError(
                f"{setting('memory_limit')} sizes a local cluster's workers; a job's worker "
                f"takes {setting('job_memory')}"
            )
        if self.scheduler_file is not None:
            if self.scheduler:
                raise SettingError(
                    f"{setting('scheduler')} and {setting('scheduler_file')} both name a "
                    "scheduler; pass one"
                )
            scheduler_file_address(self.scheduler_file)
        self._check_tls()

    def _check_tls(self) -> None:
        given = {name: getattr(self, name) for name in ("tls_ca_file", "tls_cert", "tls_key")}
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


# The sections in the order config.toml lists them; their fields are RunConfig's (config.py).
SECTIONS: dict[str, type] = {
    "data": DataSettings,
    "model": ModelSettings,
    "algorithm": AlgorithmSettings,
    "solver": SolverSettings,
    "server": ServerSettings,
    "cluster": ClusterSettings,
    "run": RunSettings,
}
