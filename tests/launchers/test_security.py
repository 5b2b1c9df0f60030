"""Security: loopback-only listening, TLS to a remote scheduler, data never executed, writes
confined to the run directory.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dask
import psutil
import pytest
import torch
import zarr

from dask_dane.datasets.integrity import DIGEST_KEY, metadata_digest
from dask_dane.datasets.store import open_store
from dask_dane.pipeline.engine.run.bounded import cluster_identity
from dask_dane.pipeline.engine.run.checkpoint import load_checkpoint
from dask_dane.pipeline.launchers.cluster import make_client
from dask_dane.pipeline.setup.config import RunConfig, to_toml
from dask_dane.pipeline.training import train

pytestmark = pytest.mark.cluster
LOOPBACK = {"127.0.0.1", "::1"}


def _workers(client) -> list[str]:
    """The cluster's worker addresses, sorted."""
    return sorted(cluster_identity(client)["workers"])


def _listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of these processes."""
    found = []
    for pid in pids:
        for conn in psutil.Process(pid).net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.append((pid, conn.laddr.ip, conn.laddr.port))
    return found


def test_started_cluster_listens_on_loopback_only(tmp_path):
    config = RunConfig(workers=1, dashboard_address="127.0.0.1:0").validate()

    with make_client(config) as client:
        me = psutil.Process()
        pids = [me.pid, *(child.pid for child in me.children(recursive=True))]
        sockets = _listening(pids)
        scheduler_port = int(client.scheduler.address.rsplit(":", 1)[1])
        dashboard_port = int(client.dashboard_link.split(":")[2].split("/")[0])
        worker = _workers(client)[0]

    ports = {port for _, _, port in sockets}
    assert {scheduler_port, dashboard_port, int(worker.rsplit(":", 1)[1])} <= ports
    assert {pid for pid, _, _ in sockets} - {me.pid}  # the worker processes were checked too
    assert {address for _, address, _ in sockets} <= LOOPBACK, sockets


def _make_certificates(folder: Path) -> dict[str, str]:
    """A CA and one certificate for 127.0.0.1 signed by it (used by all parties)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def build(subject, issuer, public_key):  # type: ignore[no-untyped-def]
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        build(name("dask-dane test CA"), name("dask-dane test CA"), ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        build(name("127.0.0.1"), ca.subject, key.public_key())
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {k: str(v) for k, v in paths.items()}


@pytest.fixture
def tls_cluster(tmp_path):
    """A TLS-only scheduler and one worker on 127.0.0.1, with certificates made here."""
    certs = _make_certificates(tmp_path)
    tls = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]]
    scheduler_file = tmp_path / "scheduler.json"
    py = [sys.executable, "-m"]
    common = ["--host", "127.0.0.1", "--no-dashboard", *tls]
    scheduler = [*py, "distributed.cli.dask_scheduler", "--protocol", "tls", "--port", "0"]
    procs = [
        subprocess.Popen(
            [*scheduler, *common, "--scheduler-file", str(scheduler_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert time.monotonic() < deadline, "the TLS scheduler did not start"
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        worker = [*py, "distributed.cli.dask_worker", address, "--nthreads", "1", *common]
        procs.append(
            subprocess.Popen(
                worker,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        yield address, certs
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_training_on_a_tls_only_scheduler_uses_the_given_certificates(
    tls_cluster, digits_stores, tmp_path
):
    address, certs = tls_cluster
    assert address.startswith("tls://127.0.0.1:")
    config = RunConfig(
        store=str(digits_stores[2]),
        out=str(tmp_path / "run"),
        scheduler=address,
        tls_ca_file=certs["ca"],
        tls_cert=certs["cert"],
        tls_key=certs["key"],
        rounds=1,
        local_steps=2,
        timeout=60,
    ).validate()

    summary = train(config)

    assert summary["rounds"] == 1
    # Dask's own TLS config works as well as the flags...
    tls_config = {
        "distributed.comm.tls.ca-file": certs["ca"],
        "distributed.comm.tls.client.cert": certs["cert"],
        "distributed.comm.tls.client.key": certs["key"],
    }
    with dask.config.set(tls_config), make_client(RunConfig(scheduler=address)) as client:
        assert len(_workers(client)) == 1
    # ...and without certificates: a clean ValueError that says what to pass.
    with (
        pytest.raises(ValueError, match="speaks TLS and no certificates are set"),
        make_client(RunConfig(scheduler=address, timeout=3)),
    ):
        pass


class _Exploit:
    """Pickles to a call of os.system: what a checkpoint must never be able to run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "latest.pt"
    torch.save({"checkpoint_version": 1, "round": 1, "payload": _Exploit(marker)}, path)

    with pytest.raises(ValueError, match="cannot be read"):
        load_checkpoint(path)

    assert not marker.exists()


def test_store_attributes_are_read_as_data(digits_stores, tmp_path):
    store = tmp_path / "s.zarr"
    import shutil

    shutil.copytree(digits_stores[2], store)
    marker = tmp_path / "pwned"
    code = f"__import__('os').system('touch {marker}')"
    group = zarr.open_group(store, mode="r+", zarr_format=3)
    group.attrs.update({"source": code, "partition": {"kind": code, "seed": code}})
    group.attrs[DIGEST_KEY] = metadata_digest(group, dict(group.attrs))  # signed, as if written

    info = open_store(store)

    assert info.source == code  # kept as the string it is
    assert info.partition["kind"] == code
    assert not marker.exists()


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_a_run_writes_only_inside_its_run_directory(cluster_client, digits_stores, tmp_path):
    # The run directory's saved config names another `out`: --resume --out must still win.
    run = tmp_path / "run"
    elsewhere = tmp_path / "elsewhere"
    run.mkdir()
    saved = RunConfig(
        store=str(digits_stores[2]),
        out=str(elsewhere),
        rounds=1,
        local_steps=2,
        scheduler=cluster_client.scheduler.address,
    )
    (run / "config.toml").write_text(to_toml(saved))
    store_before = _files(Path(digits_stores[2]))
    from dask_dane import cli

    argv, sys.argv = sys.argv, ["dane", "train", "--out", str(run), "--resume"]
    try:
        with pytest.raises(SystemExit) as done:
            cli.main()
    finally:
        sys.argv = argv

    assert done.value.code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing beside the run
    assert not elsewhere.exists()
    assert {"config.toml", "metrics.jsonl", "summary.json", "checkpoints/latest.pt"} <= set(
        _files(run)
    )
    assert _files(Path(digits_stores[2])) == store_before  # the store is only read
