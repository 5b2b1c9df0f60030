"""make_client(): the Dask cluster a run uses.

- `--scheduler ADDRESS`: connect to a running cluster (jobqueue, Kubernetes, SSH, ...);
- GPUs present and the `gpu` extra installed: dask-cuda's LocalCUDACluster, one worker per GPU;
- otherwise a LocalCluster of `--workers` processes with `--threads-per-worker` threads.
Started clusters (scheduler, nannies, workers, dashboard) listen on 127.0.0.1 unless the user
asks for another `--host` / `--dashboard-address`. A remote scheduler is reached with TLS when
`--tls-ca-file/--tls-cert/--tls-key` or Dask's `distributed.comm.tls` config say so.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

from dask_dane.pipeline.config import RunConfig


class TorchThreads(WorkerPlugin):
    """Limit torch on each worker to the worker's own threads (no oversubscription)."""

    name = "dask-dane-torch-threads"

    def setup(self, worker) -> None:  # type: ignore[no-untyped-def]
        import torch

        torch.set_num_threads(max(1, worker.state.nthreads))


def gpus_available() -> bool:
    """True when torch sees a GPU and dask-cuda is installed (imported lazily: it needs CUDA)."""
    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("dask_cuda") is not None


def _start_cluster(config: RunConfig):  # type: ignore[no-untyped-def]
    common = dict(
        host=config.host,
        dashboard_address=config.dashboard_address,
        silence_logs=logging.ERROR,
    )
    if gpus_available():
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(threads_per_worker=config.threads_per_worker, **common)
    return LocalCluster(
        n_workers=config.workers,
        threads_per_worker=config.threads_per_worker,
        processes=True,
        **common,
    )


@contextmanager
def make_client(config: RunConfig) -> Iterator[Client]:
    """A connected client; a cluster started here is closed on exit."""
    if config.scheduler:
        security = _security(config)
        if (
            config.scheduler.startswith("tls://")
            and not security.get_connection_args("client")["ssl_context"]
        ):
            raise ValueError(
                f"the scheduler {config.scheduler} speaks TLS and no certificates are set; pass "
                "--tls-ca-file, --tls-cert and --tls-key (or set distributed.comm.tls.* in the "
                "Dask config)"
            )
        try:
            client = Client(config.scheduler, timeout=config.timeout, security=security)
        except (OSError, TimeoutError) as err:
            raise ValueError(
                f"no Dask scheduler answered at {config.scheduler} within {config.timeout:g} s "
                f"({type(err).__name__}); check the address or start one with `dask scheduler`"
            ) from None
        cluster = None
    else:
        cluster = _start_cluster(config)
        client = Client(cluster)
    # The driver reports a lost scheduler itself, in one line (loop.py): the client's own
    # reconnection tracebacks would only bury it.
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    try:
        client.register_plugin(TorchThreads())
        client.wait_for_workers(1, timeout=config.timeout)
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        client_log.setLevel(level)


def _security(config: RunConfig):  # type: ignore[no-untyped-def]
    """TLS from --tls-* when given; otherwise Dask's config (distributed.comm.tls.*) applies."""
    from distributed.security import Security

    if not (config.tls_ca_file or config.tls_cert):
        return Security()  # reads the Dask config, as a plain Client(address) would
    return Security(
        tls_ca_file=config.tls_ca_file,
        tls_client_cert=config.tls_cert,
        tls_client_key=config.tls_key,
        require_encryption=True,
    )


def worker_addresses(client: Client) -> list[str]:
    """Addresses of the cluster's workers, sorted so shard placement is reproducible."""
    return sorted(client.scheduler_info(n_workers=-1)["workers"])
