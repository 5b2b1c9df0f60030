"""Run `dane prepare` in a child process per size and read the child's peak RSS.

Each size is its own process, so that one size's peak cannot hide in another's. The child
reports its own VmHWM (Linux's /proc) as it exits: ru_maxrss, from wait4 or RUSAGE_CHILDREN,
also counts the parent's pages the child held between fork and exec, so it reads the bench's
own size (about 250 MiB with Typer and the rest imported) at every size.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...datasets.builtin import SYNTHETIC_SAMPLES

DEFAULT_SIZES = (SYNTHETIC_SAMPLES, 10 * SYNTHETIC_SAMPLES, 100 * SYNTHETIC_SAMPLES)
MIB = 2**20


SOURCES = ("synthetic", "images")
NUM_CLASSES = 10  # class folders of the images tree


def prepare_args(
    source: str, rows: int, out: Path, *, image_size: int, shards: int, tree: Path | None = None
) -> list[str]:
    """`dane prepare`'s arguments: `rows` synthetic images of `image_size` squared, or the
    images of `tree` (write_image_tree)."""
    name = "synthetic" if source == "synthetic" else f"images:{tree}"
    sized = ["--samples", str(rows), "--image-size", str(image_size)]
    return [
        "prepare", name, *(sized if source == "synthetic" else []),
        "--shards", str(shards), "--out", str(out), "--force",
    ]  # fmt: skip


def write_image_tree(root: Path, rows: int, image_size: int) -> Path:
    """`rows` grey PNGs of `image_size` squared in NUM_CLASSES class folders under `root`."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in range(NUM_CLASSES):
        (root / f"class{label}").mkdir(parents=True)
    for i in range(rows):
        pixels = rng.integers(0, 256, size=(image_size, image_size), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"class{i % NUM_CLASSES}" / f"{i:07d}.png")
    return root


def row_bytes(source: str, image_size: int) -> int:
    """The bytes of one stored row: float32 synthetic images or uint8 grey ones."""
    return image_size * image_size * (4 if source == "synthetic" else 1)


# Run in the child: `dane ARGS` as `python -m dask_dane` runs it, then write the process's
# high-water RSS (KiB) to the file named first.
CHILD = """
import atexit, runpy, sys
report, sys.argv = sys.argv[1], ["dane", *sys.argv[2:]]
def write_peak():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(report, "w") as out:
        out.write(kib)
atexit.register(write_peak)
runpy.run_module("dask_dane", run_name="__main__")
"""


def peak_rss(args: list[str]) -> dict[str, Any]:
    """Run `dane ARGS` in a child process; its peak RSS (bytes) and wall time."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "peak"
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(report), *args], capture_output=True, text=True
        )
        wall_s = time.perf_counter() - start
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise RuntimeError(f"dane {' '.join(args)} failed: {' '.join(tail)}")
        peak = int(report.read_text()) * 1024
    return {"peak_rss_bytes": peak, "wall_s": round(wall_s, 3)}


def run_prepare_memory(
    sizes: tuple[int, ...],
    *,
    source: str = "synthetic",
    image_size: int,
    shards: int,
    workdir: Path,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Peak RSS of `dane prepare SOURCE` at each size in `sizes` (rows in all)."""
    rows = []
    for size in sizes:
        tree = None
        if source == "images":  # written before the clock and the measured process start
            tree = write_image_tree(workdir / f"tree-{size}", size, image_size)
        out = workdir / f"{source}-{size}.zarr"
        args = prepare_args(source, size, out, image_size=image_size, shards=shards, tree=tree)
        measured = peak_rss(args)
        if tree is not None:
            shutil.rmtree(tree)
        shutil.rmtree(out)
        rows.append({"rows": size, "data_bytes": size * row_bytes(source, image_size), **measured})
        log(f"{size} rows: peak RSS {measured['peak_rss_bytes'] / MIB:.0f} MiB")
    return {"source": source, "image_size": image_size, "shards": shards, "runs": rows}


def markdown_table(result: dict[str, Any]) -> str:
    """Rows, data size and peak RSS, one line per size."""
    lines = ["| rows | data (MiB) | peak RSS (MiB) | wall (s) |", "|---:|---:|---:|---:|"]
    for run in result["runs"]:
        lines.append(
            f"| {run['rows']} | {run['data_bytes'] / MIB:.1f} | "
            f"{run['peak_rss_bytes'] / MIB:.0f} | {run['wall_s']:.1f} |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Peak RSS and the data's own size against rows (log-log)."""
    from ...pipeline.report import pyplot, save_figure

    fig, axis = pyplot().subplots(figsize=(5.5, 4))
    runs = result["runs"]
    rows = [r["rows"] for r in runs]
    axis.plot(rows, [r["peak_rss_bytes"] / MIB for r in runs], "o-", label="peak RSS")
    axis.plot(rows, [r["data_bytes"] / MIB for r in runs], "k--", label="data as stored")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("rows")
    axis.set_ylabel("MiB")
    side = result["image_size"]
    axis.set_title(f"dane prepare {result['source']}, {side}x{side} images")
    axis.legend()
    fig.tight_layout()
    save_figure(fig, path)
