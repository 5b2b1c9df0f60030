"""Where the suite's time goes: each test's wall time and how busy the machine's cores were
meanwhile (all processes: the test's workers and subprocesses count), read from /proc/stat.

    PYTHONPATH=tests/house .venv/bin/python -m pytest -m cluster -p busy_cores
    .venv/bin/python tests/house/busy_cores.py busy-cores.json     (the summary)

A test whose cores idle is waiting (a timeout, a process starting elsewhere, a network
shaped on purpose); one that keeps them busy is computing. docs/testing.md reads the
summary. Not a test: a measurement, written as JSON (BUSY_CORES_OUT, else busy-cores.json).
Linux only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROWS: list[dict] = []


def _jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot: idle and iowait count as not busy."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    busy, total = _jiffies()
    start = time.monotonic()
    yield  # setup, call and teardown
    busy_after, total_after = _jiffies()
    wall = time.monotonic() - start
    share = (busy_after - busy) / max(1, total_after - total)
    _ROWS.append({"test": item.nodeid, "wall_s": round(wall, 3), "busy": round(share, 3)})


def pytest_sessionfinish(session: pytest.Session) -> None:
    Path(os.environ.get("BUSY_CORES_OUT", "busy-cores.json")).write_text(json.dumps(_ROWS))


def summary(rows: list[dict]) -> dict:
    """The wall time, the part of it the cores idled (wall x idle share), and the files that
    idle most."""
    idle = defaultdict(float)
    wall = defaultdict(float)
    for row in rows:
        path = row["test"].split("::")[0]
        wall[path] += row["wall_s"]
        idle[path] += row["wall_s"] * (1 - row["busy"])
    files = sorted(idle, key=idle.get, reverse=True)[:10]
    most_idle = {path: {"wall_s": round(wall[path]), "idle_s": round(idle[path])} for path in files}
    return {
        "wall_s": round(sum(wall.values())),
        "idle_s": round(sum(idle.values())),
        "most_idle": most_idle,
    }


if __name__ == "__main__":
    print(json.dumps(summary(json.loads(Path(sys.argv[1]).read_text())), indent=1))
