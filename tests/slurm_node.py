"""A real one-node Slurm on 127.0.0.1 for the tests: munged, slurmctld and slurmd, each run
from a private folder (its own config, key, socket, state, logs and ports), started by
`start` and stopped by `SlurmNode.stop`, so nothing of it outlives the tests.

Needs root and Debian's `slurm-wlm` and `munge` packages (.ci/run installs them). The node
has two partitions: `debug` (up, the default) and `down` (a partition whose jobs never start).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scancel", "sinfo")
NODE = "dane-node"
# A job that names no memory takes the whole node under CR_Core_Memory unless a default per
# CPU is set: then the second worker's job would wait forever behind the first.
MEM_PER_CPU_MB = 512

SLURM_CONF = """\
ClusterName=dane-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={mem_per_cpu}
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
SlurmdParameters=config_overrides
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={hostname} CPUs={cpus} RealMemory={memory}
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=down Nodes={node} MaxTime=INFINITE State=DOWN
"""


def unavailable_reason() -> str | None:
    """Why a Slurm node cannot be started here, or None."""
    if os.geteuid() != 0:
        return "a one-node Slurm needs root (CI runs as root)"
    missing = [name for name in DAEMONS if not Path(_sbin(name)).exists()]
    missing += [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: apt-get install slurm-wlm munge"
    running = _running_daemons()
    if running:
        return (
            f"a Slurm is already running here ({running}): the tests start their own and "
            "refuse to run beside another; stop it first"
        )
    return None


def _running_daemons() -> str:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            name = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if proc.name.isdigit() and name in ("slurmctld", "slurmd"):
            found.append(f"{name} pid {proc.name}")
    return ", ".join(found)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmNode:
    folder: Path
    env: dict[str, str]  # os.environ plus SLURM_CONF: what a Slurm command needs
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[str]:
        """`squeue` lines: job id, state, reason."""
        return self.run("squeue", "--noheader", "--format=%i %T %r").splitlines()

    def jobs_left(self, timeout: float = 30) -> list[str]:
        """The jobs still in the queue once `timeout` seconds have passed or none is left: a
        cancelled job shows as COMPLETING until its processes are gone."""
        deadline = time.monotonic() + timeout
        while (left := self.jobs()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def wait_for_job(self, job: str, timeout: float = 240) -> str:
        """The job's state and exit code once it has ended ("COMPLETED 0:0"), polled more
        often than `sbatch --wait` does (its pauses grow to 10 s)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.run("scontrol", "show", "job", job)
            state = re.search(r"JobState=(\S+)", shown)
            code = re.search(r"ExitCode=(\S+)", shown)
            if state and code and state.group(1) not in ("PENDING", "RUNNING", "COMPLETING"):
                return f"{state.group(1)} {code.group(1)}"
            time.sleep(0.2)
        raise TimeoutError(f"job {job} did not end within {timeout:g} s")

    def cancel_all(self) -> None:
        self.run("scancel", "--full", "--user", "root", check=False)

    def strays(self) -> list[str]:
        """Processes of this Slurm's jobs still alive outside the daemons: what a job left
        running (proctrack/linuxproc loses a job's process whose parent exited). Found by
        the SLURM_CONF every job inherits from its submitter."""
        mark = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        daemons = {proc.pid for proc in self.procs}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in daemons | {os.getpid()}:
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if mark in environ and not args.startswith("slurmctld: "):  # its slurmscriptd
                found.append(f"{entry.name} {args.strip()}")
        return found

    def stop(self) -> None:
        """Cancel every job, stop the daemons (slurmd, slurmctld, munged) and wait for them;
        then end whatever a job left behind, so that the machine is left as it was."""
        self.cancel_all()
        self.jobs_left(timeout=15)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for stray in self.strays():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stray.split()[0]), signal.SIGKILL)


def start(folder: Path, *, cpus: int = 4, memory_mb: int = 8192) -> SlurmNode:
    """A one-node Slurm in `folder`, up and idle; stop() it when done."""
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # munged refuses a key or socket folder others can write
    key = folder / "munge.key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o600)
    conf = folder / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            folder=folder,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
            mem_per_cpu=MEM_PER_CPU_MB,
            node=NODE,
            hostname=socket.gethostname(),
            cpus=cpus,
            memory=memory_mb,
        )
    )
    node = SlurmNode(folder=folder, env={**os.environ, "SLURM_CONF": str(conf)})
    munged = [_sbin("munged"), "--foreground", "--force", f"--socket={folder}/munge.socket"]
    munged += [f"--key-file={key}", f"--log-file={folder}/munged.log"]
    munged += [f"--pid-file={folder}/munged.pid", f"--seed-file={folder}/munged.seed"]
    try:
        node.procs.append(_daemon(munged, folder / "munged.out", node.env))
        _wait_for(lambda: (folder / "munge.socket").exists(), "munged", folder / "munged.log")
        ctld = [_sbin("slurmctld"), "-D", "-i", "-f", str(conf)]
        node.procs.append(_daemon(ctld, folder / "slurmctld.out", node.env))
        slurmd = [_sbin("slurmd"), "-D", "-N", NODE, "-f", str(conf)]
        node.procs.append(_daemon(slurmd, folder / "slurmd.out", node.env))
        _wait_for(lambda: _idle(node), "the Slurm node", folder / "slurmd.log")
    except BaseException:
        node.stop()
        raise
    return node


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    # Its own session, so that stop() signals its whole group.
    return subprocess.Popen(
        args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _idle(node: SlurmNode) -> bool:
    states = node.run("sinfo", "--noheader", "--format=%T", check=False).split()
    return "idle" in states


def _wait_for(ready, what: str, log: Path, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text()[-2000:] if log.exists() else "(no log)"
            raise RuntimeError(f"{what} did not start within {timeout:g} s; {log}:\n{tail}")
        time.sleep(0.2)
