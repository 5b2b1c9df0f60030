"""What the s3 tests share (tests/datasets/test_s3_server.py, against a moto server, and
tests/datasets/test_s3_no_server.py, without one): the bucket and the store's URL, and `dane` run in
a subprocess as a user runs it, with the one line it must end with when it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BUCKET = "dane-test"
STORE = f"s3://{BUCKET}/digits.zarr"


def dane(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dask_dane.cli", *args],
        cwd=cwd,
        env={**os.environ, "DANE_CACHE": str(cwd / "cache"), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr
