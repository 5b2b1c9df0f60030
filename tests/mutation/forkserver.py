"""Run a mutant's tests in a fork of a process that has already imported torch and dask.

A fresh `python -m pytest` spends about 3 s importing torch, numpy and dask before the first
test runs; with ~900 mutants that is most of the run. `serve SOCKET ROOT` imports those once
and forks one child per request; the child imports dask_dane from ROOT's parent (after the
parent imported nothing of it), so it sees the file mutmut has just mutated. `run SOCKET
ARGS...` is the tiny client mutmut calls: it sends the pytest arguments and exits 0 when the
tests pass and 1 when they fail or cannot be collected (mutmut 2 counts only exit code 1 as a
kill, so a mutant that breaks an import, pytest's exit 2 or 4, would otherwise count as
surviving).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MUTATED_MODULES = (
    "dask_dane.pipeline.algorithms",
    "dask_dane.pipeline.engine.round.aggregate",
    "dask_dane.pipeline.engine.round.comm",
    "dask_dane.models.user",
    "dask_dane.pipeline.setup.model_check",
    "dask_dane.pipeline.engine.round.objective",
    "dask_dane.pipeline.engine.round.augment",
    "dask_dane.datasets.images",
    "dask_dane.datasets.cifar",
    "dask_dane.pipeline.trained",
)


def serve(path: str, root: str) -> None:
    import pytest

    # Imported here once so that every child inherits them instead of importing them again.
    for heavy in ("torch", "numpy", "dask", "distributed", "zarr", "hypothesis", "sklearn"):
        importlib.import_module(heavy)

    sys.dont_write_bytecode = True  # a mutant must be compiled from its source, never cached
    sys.path.insert(0, os.path.dirname(os.path.abspath(root)))
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    while True:
        connection, _ = listener.accept()
        with connection:
            request = json.loads(_receive_line(connection))
            code = _run_child(pytest, root, request["args"], connection)
            connection.sendall(f"{code}\n".encode())


def _receive_line(connection: socket.socket) -> str:
    chunks = b""
    while not chunks.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        chunks += chunk
    return chunks.decode()


def _run_child(pytest, root: str, args: list[str], connection: socket.socket) -> int:
    child = os.fork()
    if child == 0:
        os.chdir(root)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        # A mutant that breaks an import (a syntax error, a name gone) fails every test; but
        # pytest reports a conftest that cannot import as a usage error (exit 4), which
        # must not read as "no such test". Import the mutated modules first: a failure is
        # a kill (exit 2, a collection error).
        try:
            for module in MUTATED_MODULES:
                importlib.import_module(module)
        except BaseException:
            os._exit(2)
        # Its own temporary root: pytest prunes the shared one, which would pull files from
        # under any other pytest running at the same time (the suite, another mutant).
        basetemp = tempfile.mkdtemp(prefix="dane-mutant-")
        code = int(pytest.main([*args, f"--basetemp={basetemp}"]))
        shutil.rmtree(basetemp, ignore_errors=True)
        os._exit(code)
    # The client is killed on mutmut's timeout: its socket closing kills the child.
    connection.setblocking(False)
    while True:
        finished, status = os.waitpid(child, os.WNOHANG)
        if finished:
            return os.waitstatus_to_exitcode(status)
        try:
            if connection.recv(1, socket.MSG_PEEK) == b"":
                os.kill(child, signal.SIGKILL)
        except BlockingIOError:
            pass
        time.sleep(0.02)


def run(path: str, args: list[str]) -> int:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 60  # the server may still be importing torch and dask
    while True:
        try:
            client.connect(path)
            break
        except (ConnectionRefusedError, FileNotFoundError):
            if time.monotonic() > deadline:
                return _verdict(_run_alone(args), args)
            time.sleep(0.5)
    client.sendall((json.dumps({"args": args}) + "\n").encode())
    line = _receive_line(client).strip()
    # No answer: the server died with this request; never a verdict the tests did not give.
    return _verdict(int(line) if line else _run_alone(args), args)


def _run_alone(args: list[str]) -> int:
    """Without a server (it died, or never came up): the same tests in a process of their
    own, slower but as valid."""
    print("mutation server not answering: running the tests alone", file=sys.stderr)
    basetemp = tempfile.mkdtemp(prefix="dane-mutant-")
    command = [sys.executable, "-c", _ALONE, *MUTATED_MODULES, "--", *args]
    command.append(f"--basetemp={basetemp}")
    # The package is the folder mutmut runs in: import it from there, as the server does.
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.getcwd())}
    try:
        return subprocess.run(command, check=False, env=env).returncode
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)


# Import the mutated modules (a failure is a kill, as in the server), then run pytest.
_ALONE = (
    "import importlib, sys, pytest\n"
    "split = sys.argv.index('--')\n"
    "try:\n"
    "    [importlib.import_module(m) for m in sys.argv[1:split]]\n"
    "except BaseException:\n"
    "    sys.exit(2)\n"
    "sys.exit(int(pytest.main(sys.argv[split + 1:])))\n"
)


def _verdict(code: int, args: list[str]) -> int:
    """0 when the tests pass, else 1: a failure, an error, and also pytest's "no such test"
    (exit 4) or "no tests" (5), which with explicit test ids mean that a test module no longer
    imports under the mutant; the ids themselves exist (coverage_map.py collects them all
    before the map is written)."""
    return 0 if code == 0 else 1


if __name__ == "__main__":
    command, socket_path, *rest = sys.argv[1:]
    if command == "serve":
        serve(socket_path, rest[0])
    else:
        sys.exit(run(socket_path, rest))
